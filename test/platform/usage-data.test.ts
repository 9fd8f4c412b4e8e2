// The usage page's table comes from the daily totals settlement keeps, by
// model, API and tier, the account's and each key's, never from the usage
// events: a busy account's
// month is millions of events, and reading them took a replica's CPU for
// seconds at each view (300,000 events: 3.5 s).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAILY_TOTALS_KEPT_DAYS, settleHolds, utcDay, type Settlement } from '../../src/billing/credit-ledger.js';
import { tokenPrices } from '../../src/billing/prices.js';
import { daysBetween, NOT_RECORDED, usageByDayAndModel } from '../../src/platform/usage-data.js';
import { redisKeys } from '../../src/redis/keys.js';
import { holdCredit } from '../support/ledger.js';
import { makeAccount } from '../support/gateway.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

const prices = tokenPrices({ inputCacheMiss: 1, inputCacheHit: 0.5, output: 2 });

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

/** Holds for and settles one complete reply: 10 prompt tokens (4 cached), 5 completion tokens, `cost` charged. */
async function served(account: string, id: string, cost: number, of: Partial<Settlement>): Promise<void> {
  await holdCredit(redis.client, { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 5 });
  const settlement: Settlement = {
    account, keyId: 'key_a', requestId: id, model: 'm', endpoint: 'e', outcome: 'complete',
    usage: { prompt_tokens: 10, completion_tokens: 5, cached_tokens: 4 }, cost, ...of,
  };
  expect(await settleHolds(redis.client, [settlement])).toEqual([{ charged: cost }]);
}

describe('the usage table', () => {
  it('sums each day by model, API and tier, for one key or all, with the events gone', async () => {
    const { account } = await makeAccount(redis, 1);
    await served(account, 'r1', 10, {});
    await served(account, 'r2', 20, {});
    await served(account, 'r3', 5, { api: 'messages', keyId: 'key_b' });
    await served(account, 'r4', 3, { tier: 'flex', keyId: 'key_b' });
    // A reply that did not complete is in the events but not in the table.
    await holdCredit(redis.client, { account, requestId: 'r5', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 5 });
    await settleHolds(redis.client, [{ account, keyId: 'key_a', requestId: 'r5', model: 'm', endpoint: 'e', outcome: 'failed', usage: { prompt_tokens: 10, completion_tokens: 0, cached_tokens: 0 }, cost: 7 }]);
    // The table does not read the events: without them it is the same.
    await redis.client.del(redisKeys.usageEvents(account));
    const today = utcDay(Date.now());
    const row = (api: string, tier: string, requests: number, cost: number) => ({ day: today, model: 'm', api, tier, requests, promptTokens: 10 * requests, cachedTokens: 4 * requests, completionTokens: 5 * requests, cost });
    expect(await usageByDayAndModel(redis.client, account, [today])).toEqual([row('chat', 'default', 2, 30), row('chat', 'flex', 1, 3), row('messages', 'default', 1, 5)]);
    expect(await usageByDayAndModel(redis.client, account, [today], 'key_b')).toEqual([row('chat', 'flex', 1, 3), row('messages', 'default', 1, 5)]);
    expect(await usageByDayAndModel(redis.client, account, [today], 'key_none')).toEqual([]);
    // However many keys and requests, a day is one hash of a field per model, API, tier and metric.
    expect(await redis.client.hlen(redisKeys.dailyUsage(account, today))).toBe(3 * 5);
    expect(await redis.client.hlen(redisKeys.keyDailyUsage(account, 'key_b', today))).toBe(2 * 5);
    expect(await redis.client.ttl(redisKeys.keyDailyUsage(account, 'key_b', today))).toBeGreaterThan((DAILY_TOTALS_KEPT_DAYS - 1) * 86_400);
  });

  it('shows a day kept before the totals had groups by its model, its API and tier not recorded, and in no key\'s view', async () => {
    const { account } = await makeAccount(redis, 1);
    await redis.client.hset(redisKeys.dailyUsage(account, '2026-11-01'), { 'm\trequests': 3, 'm\tprompt_tokens': 30, 'm\tcached_tokens': 0, 'm\tcompletion_tokens': 9, 'm\tcost': 42 });
    expect(await usageByDayAndModel(redis.client, account, ['2026-11-01'])).toEqual([
      { day: '2026-11-01', model: 'm', api: NOT_RECORDED, tier: NOT_RECORDED, requests: 3, promptTokens: 30, cachedTokens: 0, completionTokens: 9, cost: 42 },
    ]);
    expect(await usageByDayAndModel(redis.client, account, ['2026-11-01'], 'key_a')).toEqual([]);
  });

  it('reads at most the days totals are kept for, whatever range is asked', () => {
    expect(daysBetween('2026-11-01', '2026-11-03')).toEqual(['2026-11-01', '2026-11-02', '2026-11-03']);
    expect(daysBetween('2026-11-03', '2026-11-01')).toEqual([]);
    const long = daysBetween('0001-01-01', '2026-11-29');
    expect(long).toHaveLength(DAILY_TOTALS_KEPT_DAYS);
    expect(long.at(-1)).toBe('2026-11-29');
  });
});
