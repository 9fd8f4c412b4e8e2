// An account's running batches are counted in its own slot: creating one
// reads none of the fleet's other batches (before, it read the fleet's whole
// active set, which at 100,000 batches running held Redis 14 ms a create),
// the cap holds, a batch taken out of the fleet's set frees its place, and
// an entry a replica left behind stops counting once its batch could run no
// longer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBatch, MAX_ACTIVE_BATCHES, retireActive, type NewBatch } from '../../src/batches/batch-store.js';
import { storedLines } from '../../src/batches/stored-lines.js';
import { redisKeys } from '../../src/redis/keys.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

const keep = { ms: 60_000, capBytes: 64 * 2 ** 20 };
let made = 0;
const ONLY_LINE = JSON.stringify(['only', { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }]);
const batch = (account: string): NewBatch => ({
  id: `batch_${++made}`, api: 'anthropic', account, keyId: 'key_1', endpoint: '/v1/messages', inputFileId: null, metadata: null, model: 'm', windowMs: 86_400_000,
  stored: { lines: storedLines([ONLY_LINE]), order: [0] },
});
/** What Redis has sent its clients so far: reading the fleet's set whole would send each of its 5,000 entries. */
const bytesSent = async () => Number(/^total_net_output_bytes:(\d+)/m.exec(await redis.client.info('stats'))![1]);

describe("an account's running batches", () => {
  it("are counted without reading the fleet's other batches, up to the most, and a batch taken out frees its place", async () => {
    const others = Array.from({ length: 5_000 }, (_, i) => [i, `acct_other${i} batch_x`]).flat();
    await redis.client.zadd(redisKeys.activeBatches, ...others);
    const before = await bytesSent();
    const mine = [];
    for (let i = 0; i < MAX_ACTIVE_BATCHES; i++) {
      const b = batch('acct_capped');
      await createBatch(redis.client, b, keep);
      mine.push(b.id);
    }
    await expect(createBatch(redis.client, batch('acct_capped'), keep)).rejects.toMatchObject({ status: 429, code: 'too_many_batches' });
    await createBatch(redis.client, batch('acct_free'), keep);
    // 102 creates: under 1 MB in all, where reading the fleet's set at each would be about 12 MB.
    expect((await bytesSent()) - before).toBeLessThan(2 ** 20);
    await retireActive(redis.client, 'acct_capped', mine[0]);
    expect(await redis.client.zscore(redisKeys.activeBatches, `acct_capped ${mine[0]}`)).toBeNull();
    await createBatch(redis.client, batch('acct_capped'), keep);
  });

  it('stop counting an entry a replica left behind once its batch could run no longer', async () => {
    const account = 'acct_left_behind';
    const lapsed = Array.from({ length: MAX_ACTIVE_BATCHES }, (_, i) => [Date.now() - 1, `batch_gone_${i}`]).flat();
    await redis.client.zadd(redisKeys.accountActiveBatches(account), ...lapsed);
    await createBatch(redis.client, batch(account), keep);
    expect(await redis.client.zcard(redisKeys.accountActiveBatches(account))).toBe(1);
  });
});
