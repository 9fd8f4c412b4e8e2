// A batch's results are sent about a MiB at a time, each part whole lines:
// a download holds one part while its client reads it, and that part is what
// its account's bytes in flight count (gateway/batch-routes.ts; the count is
// tested in test/gateway/body-budget.test.ts). Sent a page of 500 results at
// a time, one part could have been 500 replies of any length.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resultLines } from '../../src/batches/batch-results.js';
import type { BatchRecord } from '../../src/batches/batch-store.js';
import { DOWNLOAD_PART_BYTES } from '../../src/protocol/http-io.js';
import { SUCCEEDED } from '../../src/batches/line-formats.js';
import { redisKeys } from '../../src/redis/keys.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

describe("a batch's results, downloaded", () => {
  it('come about a MiB at a time, in whole lines, in input order', async () => {
    const total = 400;
    const reply = (i: number) => JSON.stringify({ custom_id: `r${i}`, text: `${i} `.padEnd(20_000, 'x') });
    await redis.client.hset(redisKeys.batch('acct_dl', 'msgbatch_dl').results, Object.fromEntries(Array.from({ length: total }, (_, i) => [String(i), SUCCEEDED + reply(i)])));
    const batch = { id: 'msgbatch_dl', api: 'anthropic', account: 'acct_dl', status: 'completed', counts: { total } } as BatchRecord;
    const parts: string[] = [];
    for await (const part of resultLines(redis.client, batch, 'all')) parts.push(part);
    // 8 MB of results: eight parts or so, none much over a MiB, each ending at a line's end.
    expect(parts.length).toBeGreaterThanOrEqual(7);
    for (const part of parts) {
      expect(part.length).toBeLessThan(DOWNLOAD_PART_BYTES + 21_000);
      expect(part.endsWith('\n')).toBe(true);
    }
    expect(parts.join('').split('\n').slice(0, -1)).toEqual(Array.from({ length: total }, (_, i) => reply(i)));
  });
});
