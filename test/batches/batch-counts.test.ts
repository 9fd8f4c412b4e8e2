// A batch's lines by state add up to its lines, whenever they are read: a
// line's success is written by its settlement and its lease dropped a moment
// later, and a reading between the two (the admin API's, /metrics', the
// platform's bar) counted it both done and running: 61 of 60 in a test run.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimLines, createBatch, readBatch } from '../../src/batches/batch-store.js';
import { readBatchInput } from '../../src/batches/input-reading.js';
import { SUCCEEDED } from '../../src/batches/line-formats.js';
import { redisKeys } from '../../src/redis/keys.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

describe("a batch's lines by state", () => {
  it('add up to its lines while a line done still holds its lease', async () => {
    const line = (i: number) => JSON.stringify({ custom_id: `r${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: `q${i}` }] } });
    const read = readBatchInput({ kind: 'openai', endpoint: '/v1/chat/completions', content: [Buffer.from([0, 1, 2, 3, 4].map(line).join('\n'))] });
    if (!('lines' in read)) throw read;
    const batch = { id: 'batch_counts', api: 'openai' as const, account: 'acct_counts', keyId: 'key_1', endpoint: '/v1/chat/completions', inputFileId: null, metadata: null, model: 'm', windowMs: 86_400_000, stored: read };
    await createBatch(redis.client, batch, { ms: 60_000, capBytes: 2 ** 30 });
    const claim = await claimLines(redis.client, batch.account, batch.id, 2, 30_000, 'replica-a');
    expect(claim.kind === 'run' && claim.lines).toHaveLength(2);
    // The first claimed line's settlement writes its success, as the ledger's does; its lease is not dropped yet.
    const [first] = claim.kind === 'run' ? claim.lines : [];
    const results = redisKeys.batch(batch.account, batch.id).results;
    await redis.client.multi().hset(results, first.line, `${SUCCEEDED}{}`).hincrby(results, '#succeeded', 1).exec();
    const { counts } = (await readBatch(redis.client, batch.account, batch.id))!;
    expect(counts).toMatchObject({ total: 5, queued: 3, running: 1, succeeded: 1, errored: 0 });
  });
});
