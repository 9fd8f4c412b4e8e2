// The credit scripts alone, against a real redis-server and against a real
// 3-primary Redis Cluster: holds, their expiry, settlement at most once,
// deductions, batches.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { changeCredit, readBalance, settleHolds, utcDay, type HoldRequest, type Settlement } from '../../src/billing/credit-ledger.js';
import { holdCredit, settleHold } from '../support/ledger.js';
import { HoldQueue } from '../../src/billing/hold-queue.js';
import { SettlementQueue } from '../../src/billing/settlement-queue.js';
import { readUsageEvents } from '../../src/billing/usage-events.js';
import { redisKeys } from '../../src/redis/keys.js';
import { connectRedis } from '../../src/redis/connection.js';
import { MAX_BALANCE_MICROS, tokenPrices } from '../../src/billing/prices.js';
import { rateCheck } from '../../src/ratelimit/rate-limiter.js';
import { sleep } from '../support/fake-upstream.js';
import { makeAccount } from '../support/gateway.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';
import { startClusterAsTestRedis } from '../support/redis-topologies.js';

const prices = tokenPrices({ inputCacheMiss: 1, inputCacheHit: 0.5, output: 2 });

const TOPOLOGIES = [
  { topology: 'one redis-server', oneServer: true, start: startTestRedis },
  { topology: 'a 3-primary Redis Cluster', oneServer: false, start: startClusterAsTestRedis },
];

describe.each(TOPOLOGIES)('on $topology', ({ oneServer, start }) => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await start();
  }, 60_000);
  afterAll(() => redis.stop());
  // What counts script calls or keys of the one server, or sends one script across accounts' slots.
  const onOneServer = oneServer ? it : it.skip;

  const scriptCalls = async () => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.client.info('commandstats'))?.[1] ?? 0);

  const settlement = (account: string, requestId: string, cost: number): Settlement => ({
    account, keyId: 'k', requestId, model: 'm', endpoint: 'e', outcome: 'complete',
    usage: { prompt_tokens: 10, completion_tokens: 10, cached_tokens: 0 }, cost,
  });

  describe('holds and settlement', () => {
    it('holds the most a request can cost: prompt at the miss price plus n full replies', async () => {
      const { account } = await makeAccount(redis, 1);
      const hold = await holdCredit(redis.client, { account, requestId: 'h1', ttlMs: 60_000, prices, promptTokens: 1000, n: 3, maxReplyTokens: 500 });
      expect(hold).toEqual({ kind: 'held', amount: 1000 + 3 * 500 * 2, maxReplyTokens: 500 });
      expect((await readBalance(redis.client, account))!.held).toBe(4000);
    });

    it('settles a request id at most once', async () => {
      const { account } = await makeAccount(redis, 1);
      await holdCredit(redis.client, { account, requestId: 'once', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      expect(await settleHold(redis.client, settlement(account, 'once', 30))).toBe(30);
      expect(await settleHold(redis.client, settlement(account, 'once', 30))).toBeUndefined();
      expect(await readBalance(redis.client, account)).toEqual({ granted: 1_000_000 - 30, toppedUp: 0, held: 0 });
    });

    it('reclaims a hold whose replica stopped extending it', async () => {
      const { account } = await makeAccount(redis, 1);
      await holdCredit(redis.client, { account, requestId: 'orphan', ttlMs: 300, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      expect((await readBalance(redis.client, account))!.held).toBe(30);
      await sleep(400);
      expect((await readBalance(redis.client, account))!.held).toBe(0);
    });

    it('never charges below zero, even for a reply whose hold expired', async () => {
      const { account } = await makeAccount(redis, 0.00005); // 50 micro-units
      await holdCredit(redis.client, { account, requestId: 'late', ttlMs: 100, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      await sleep(200);
      expect(await settleHold(redis.client, settlement(account, 'late', 80))).toBe(50);
      expect(await readBalance(redis.client, account)).toEqual({ granted: 0, toppedUp: 0, held: 0 });
    });

    it('charges a reply that outlived its hold once, however often its settlement comes', async () => {
      const { account } = await makeAccount(redis, 1);
      await holdCredit(redis.client, { account, requestId: 'outlived', ttlMs: 100, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      await sleep(200);
      expect((await readBalance(redis.client, account))!.held).toBe(0);
      expect(await settleHold(redis.client, settlement(account, 'outlived', 30))).toBe(30);
      expect(await settleHold(redis.client, settlement(account, 'outlived', 30))).toBeUndefined();
      expect(await readBalance(redis.client, account)).toEqual({ granted: 1_000_000 - 30, toppedUp: 0, held: 0 });
      expect(await redis.client.hlen(redisKeys.holdAmounts(account))).toBe(0);
      expect(await redis.client.zcard(redisKeys.reclaimedHolds(account))).toBe(0);
    });

    it('settles a request id once even when one batch carries it twice', async () => {
      const { account } = await makeAccount(redis, 1);
      await holdCredit(redis.client, { account, requestId: 'twice', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      expect(await settleHolds(redis.client, [settlement(account, 'twice', 30), settlement(account, 'twice', 30)])).toEqual([{ charged: 30 }, 'already settled']);
      expect(await readBalance(redis.client, account)).toEqual({ granted: 1_000_000 - 30, toppedUp: 0, held: 0 });
    });

    onOneServer('leaves nothing in Redis per settled request but its usage event', async () => {
      const { account } = await makeAccount(redis, 1);
      const serve = async (requestId: string) => {
        await holdCredit(redis.client, { account, requestId, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
        await settleHold(redis.client, settlement(account, requestId, 30));
      };
      await serve('first');
      const keys = await redis.client.dbsize();
      for (const id of ['second', 'third', 'fourth']) await serve(id);
      expect(await redis.client.dbsize()).toBe(keys);
      expect(await redis.client.hlen(redisKeys.holdAmounts(account))).toBe(0);
      expect(await redis.client.xlen(redisKeys.usageEvents(account))).toBe(4);
    });

    it('forgets a reclaimed hold two days after, when its settlement can no longer come', async () => {
      const { account } = await makeAccount(redis, 1);
      for (const requestId of ['long-gone', 'recent']) {
        await holdCredit(redis.client, { account, requestId, ttlMs: 100, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
        await sleep(200);
        await readBalance(redis.client, account);
        // The first was reclaimed three days before the second.
        if (requestId === 'long-gone') await redis.client.zadd(redisKeys.reclaimedHolds(account), 'XX', Date.now() - 3 * 86_400_000, requestId);
      }
      expect(await redis.client.hgetall(redisKeys.holdAmounts(account))).toEqual({ recent: 'reclaimed' });
      expect(await redis.client.zrange(redisKeys.reclaimedHolds(account), 0, -1)).toEqual(['recent']);
      expect(await settleHold(redis.client, settlement(account, 'recent', 30))).toBe(30);
    });

    it('refuses a hold when open holds already take the whole balance', async () => {
      const { account } = await makeAccount(redis, 0.0001); // 100 micro-units
      expect((await holdCredit(redis.client, { account, requestId: 'a', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 45 })).kind).toBe('held');
      expect(await holdCredit(redis.client, { account, requestId: 'b', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 45 })).toEqual({ kind: 'no_credit', available: 0 });
    });

    it('files each account\'s usage events in a stream of its own', async () => {
      const a = await makeAccount(redis, 1);
      const b = await makeAccount(redis, 1);
      for (const [account, id] of [[a.account, 'ua1'], [b.account, 'ub1'], [a.account, 'ua2']]) {
        await holdCredit(redis.client, { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
        await settleHold(redis.client, settlement(account, id, 30));
      }
      const read: string[] = [];
      for await (const e of readUsageEvents(redis.client, a.account)) read.push(e.requestId);
      expect(read).toEqual(['ua1', 'ua2']);
      expect(await redis.client.xlen(redisKeys.usageEvents(a.account))).toBe(2);
    });

    onOneServer('sends the settlements of one event-loop turn to Redis in one script call', async () => {
      const { account } = await makeAccount(redis, 1);
      const ids = Array.from({ length: 20 }, (_, i) => `batch-${i}`);
      for (const id of ids) await holdCredit(redis.client, { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      const before = await scriptCalls();
      const queue = new SettlementQueue(redis.client);
      await Promise.all(ids.map((id) => queue.settle(settlement(account, id, 30))));
      expect((await scriptCalls()) - before).toBe(1);
      expect(await readBalance(redis.client, account)).toEqual({ granted: 1_000_000 - 20 * 30, toppedUp: 0, held: 0 });
    });

    it('settles a request whose failure text holds a lone surrogate, as UTF-8 would have written it', async () => {
      const { account } = await makeAccount(redis, 1);
      await holdCredit(redis.client, { account, requestId: 'odd-text', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      const broke: Settlement = { ...settlement(account, 'odd-text', 30), outcome: 'broke_off', reason: 'upstream said \ud800 then \ud83d\ude00', model: 'm\udfff' };
      expect(await settleHolds(redis.client, [broke])).toEqual([{ charged: 0 }]);
      const [event] = await redis.client.xrange(redisKeys.usageEvents(account), '-', '+');
      const fields = Object.fromEntries(event[1].flatMap((v, i, all) => (i % 2 ? [] : [[v, all[i + 1]]])));
      expect([fields.reason, fields.model]).toEqual(['upstream said \ufffd then \ud83d\ude00', 'm\ufffd']);
      expect((await readBalance(redis.client, account))!.held).toBe(0);
    });

    it('refuses a malformed settlement in a batch without writing anything for it, and lands the rest', async () => {
      const { account } = await makeAccount(redis, 1);
      for (const id of ['good-1', 'bad', 'good-2']) await holdCredit(redis.client, { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      const heldEach = (await readBalance(redis.client, account))!.held / 3;
      const queue = new SettlementQueue(redis.client);
      const bad = { ...settlement(account, 'bad', 30), usage: { prompt_tokens: Number.NaN, completion_tokens: 1, cached_tokens: 0 } };
      await Promise.all([queue.settle(settlement(account, 'good-1', 30)), queue.settle(bad), queue.settle(settlement(account, 'good-2', 30))]);
      // Charged for the two good ones only; the bad one's hold stays until it expires, and it has no usage event.
      expect(await readBalance(redis.client, account)).toEqual({ granted: 1_000_000 - 2 * 30, toppedUp: 0, held: heldEach });
      const settled: string[] = [];
      for await (const e of readUsageEvents(redis.client, account)) settled.push(e.requestId);
      expect(settled).toEqual(['good-1', 'good-2']);
      await expect(settleHold(redis.client, bad)).rejects.toThrow(/refused/);
    });

    it('drops usage events older than the retention it is given as it appends a new one, and keeps them all without one', async () => {
      const { account } = await makeAccount(redis, 1);
      await redis.client.xadd(redisKeys.usageEvents(account), '1000-0', 'request_id', 'from-1970');
      const requestIds = async () => {
        const ids: string[] = [];
        for await (const e of readUsageEvents(redis.client, account)) ids.push(e.requestId);
        return ids;
      };
      for (const id of ['kept', 'trimming']) await holdCredit(redis.client, { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 10 });
      await settleHold(redis.client, settlement(account, 'kept', 30));
      expect(await requestIds()).toEqual(['from-1970', 'kept']);
      await settleHold(redis.client, settlement(account, 'trimming', 30), 86_400_000);
      expect(await requestIds()).toEqual(['kept', 'trimming']);
    });

    it('deducts granted credit first and never below zero', async () => {
      const { account } = await makeAccount(redis, 1);
      await changeCredit(redis.client, account, 'top_up', 2_000_000, 'code');
      expect(await changeCredit(redis.client, account, 'deduct', 1_500_000, 'refund')).toEqual({ kind: 'applied', balance: 1_500_000, amount: 1_500_000 });
      expect(await readBalance(redis.client, account)).toEqual({ granted: 0, toppedUp: 1_500_000, held: 0 });
      expect(await changeCredit(redis.client, account, 'deduct', 9_000_000, 'all')).toEqual({ kind: 'applied', balance: 0, amount: 1_500_000 });
    });

    it('deducts no more than open holds leave, so the requests they pay for are still charged in full', async () => {
      const { account } = await makeAccount(redis, 1);
      // 100,000 prompt and reply tokens at 1 and 2 a million: a hold of 300,000 micro-units of a balance of 1,000,000.
      await holdCredit(redis.client, { account, requestId: 'open', ttlMs: 60_000, prices, promptTokens: 100_000, n: 1, maxReplyTokens: 100_000 });
      const { held } = (await readBalance(redis.client, account))!;
      expect(held).toBe(300_000);
      expect(await changeCredit(redis.client, account, 'deduct', 1_000_000, 'all of it')).toEqual({ kind: 'applied', balance: 300_000, amount: 700_000 });
      await settleHold(redis.client, settlement(account, 'open', 300_000));
      expect(await readBalance(redis.client, account)).toEqual({ granted: 0, toppedUp: 0, held: 0 });
    });

    it('refuses a grant or top-up that would take the balance past the most it may be, and moves nothing', async () => {
      const { account } = await makeAccount(redis, 1);
      expect(await changeCredit(redis.client, account, 'grant', MAX_BALANCE_MICROS, 'too much')).toEqual({ kind: 'over_maximum', balance: 1_000_000 });
      expect(await changeCredit(redis.client, account, 'top_up', MAX_BALANCE_MICROS - 1_000_000, 'just fits')).toMatchObject({ kind: 'applied', balance: MAX_BALANCE_MICROS });
      await expect(changeCredit(redis.client, account, 'grant', 2 ** 60, 'past doubles')).rejects.toThrow(RangeError);
      await expect(changeCredit(redis.client, account, 'grant', 0, 'nothing')).rejects.toThrow(RangeError);
      expect(await redis.client.xlen(redisKeys.ledger(account))).toBe(2);
    });

    it('applies a change with an id once, however often it is retried, and says so', async () => {
      const { account } = await makeAccount(redis, 1);
      const grants = await Promise.all(Array.from({ length: 5 }, () => changeCredit(redis.client, account, 'grant', 2_000_000, 'retried', 'idem-1')));
      expect(grants.filter((g) => g.kind === 'applied')).toEqual([{ kind: 'applied', balance: 3_000_000, amount: 2_000_000 }]);
      expect(grants.filter((g) => g.kind === 'applied_before')).toHaveLength(4);
      expect((await readBalance(redis.client, account))!.granted).toBe(3_000_000);
      expect(await redis.client.xlen(redisKeys.ledger(account))).toBe(2);
      expect(await changeCredit(redis.client, 'no-such', 'grant', 1, 'x', 'idem-2')).toEqual({ kind: 'no_account' });
      expect(await readBalance(redis.client, 'no-such')).toBeUndefined();
    });
  });

  describe('admission: the rate limit and the hold in one script', () => {
    const limits = { requestsPerMinute: 2, tokensPerMinute: 1_000, concurrentRequests: 0 };
    // One instant for every check of a test, so that they share a window even across a minute's end.
    const now = Date.now();

    it("counts a held request against its account and says where the account stands in its window", async () => {
      const { account } = await makeAccount(redis, 1);
      const check = rateCheck(account, limits, 30, now);
      const hold = await holdCredit(redis.client, { account, requestId: 'r1', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 20 }, check);
      expect(hold).toMatchObject({ kind: 'held', rate: { limits, requests: 1, tokens: 30 } });
      // The window expires on its own, a little after its minute.
      const ttl = await redis.client.pttl(check.key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(65_000);
    });

    it('refuses past the budget, saying which limit, and holds nothing for the refused request', async () => {
      const { account } = await makeAccount(redis, 1);
      const ask = (id: string) => holdCredit(redis.client, { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 20 }, rateCheck(account, limits, 30, now));
      await ask('b1');
      await ask('b2');
      const held = (await readBalance(redis.client, account))!.held;
      expect(await ask('b3')).toMatchObject({ kind: 'rate_limited', over: 'requests', rate: { requests: 2 } });
      expect((await readBalance(redis.client, account))!.held).toBe(held);
    });

    it('spends none of the account\'s budget on a request refused for want of credit', async () => {
      const { account } = await makeAccount(redis, 0);
      const ask = () => holdCredit(redis.client, { account, requestId: 'c', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 20 }, rateCheck(account, limits, 30, now));
      for (let i = 0; i < 3; i++) expect((await ask()).kind).toBe('no_credit');
      expect(await ask()).toMatchObject({ kind: 'no_credit', rate: { requests: 0 } });
    });
  });

  describe('three replicas on one Redis', () => {
    // Each script reads what it changes and writes it back: only running alone keeps another replica's request from being lost in between.
    it("count every request of several tenants once, in the day's totals, the rate windows and the balances", async () => {
      const replicas = await Promise.all([1, 2, 3].map((i) => connectRedis(redis.shared ?? redis.url, `replica-${i}`)));
      try {
        const tenants = await Promise.all([1, 2, 3, 4].map(() => makeAccount(redis, 1)));
        const queues = replicas.map((r) => ({ holds: new HoldQueue(r), settlements: new SettlementQueue(r) }));
        const limits = { requestsPerMinute: 1_000, tokensPerMinute: 1_000_000, concurrentRequests: 0 };
        const now = Date.now();
        const requests = tenants.flatMap(({ account }) => Array.from({ length: 12 }, (_, i) => ({ account, id: `${account}-r${i}`, on: queues[i % 3] })));
        await Promise.all(requests.map(async ({ account, id, on }) => {
          const held = await on.holds.hold({ hold: { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 20 }, rate: rateCheck(account, limits, 30, now) });
          expect(held.kind).toBe('held');
          await on.settlements.settle(settlement(account, id, 7));
        }));
        for (const { account } of tenants) {
          expect(await redis.client.hmget(redisKeys.dailyUsage(account, utcDay(now)), 'm\tchat\tdefault\trequests', 'm\tchat\tdefault\tprompt_tokens', 'm\tchat\tdefault\tcost')).toEqual(['12', '120', '84']);
          expect(await redis.client.hmget(rateCheck(account, limits, 30, now).key, 'requests', 'tokens')).toEqual(['12', '360']);
          expect(await readBalance(redis.client, account)).toEqual({ granted: 1_000_000 - 84, toppedUp: 0, held: 0 });
        }
      } finally {
        for (const r of replicas) r.disconnect();
      }
    });
  });

  describe('batches: what one turn asks for goes to Redis in one script call, applied in order', () => {
    // Each: 10 prompt tokens at 1 micro-unit plus 20 reply tokens at 2, so 50 micro-units in full.
    const ask = (account: string, requestId: string): HoldRequest => ({ account, requestId, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 20 });

    onOneServer('holds in order until the balance runs out: in full, then lowered, then refused', async () => {
      const { account } = await makeAccount(redis, 0.00012); // 120 micro-units
      const holds = new HoldQueue(redis.client);
      const before = await scriptCalls();
      const results = await Promise.all(['h1', 'h2', 'h3', 'h4'].map((id) => holds.hold({ hold: ask(account, id) })));
      expect((await scriptCalls()) - before).toBe(1);
      expect(results).toEqual([
        { kind: 'held', amount: 50, maxReplyTokens: 20 },
        { kind: 'held', amount: 50, maxReplyTokens: 20 },
        { kind: 'held', amount: 20, maxReplyTokens: 5 },
        { kind: 'no_credit', available: 0 },
      ]);
      expect(await readBalance(redis.client, account)).toEqual({ granted: 120, toppedUp: 0, held: 120 });
      expect(await redis.client.hgetall(redisKeys.holdAmounts(account))).toEqual({ h1: '50', h2: '50', h3: '20' });
    });

    it('answers each hold of a batch for its own account: one unknown, one funded, one with nothing left', async () => {
      const funded = await makeAccount(redis, 1);
      const empty = await makeAccount(redis, 0);
      const holds = new HoldQueue(redis.client);
      const results = await Promise.all([ask('no-such-account', 'm1'), ask(funded.account, 'm2'), ask(empty.account, 'm3')].map((hold) => holds.hold({ hold })));
      expect(results.map((r) => r.kind)).toEqual(['no_account', 'held', 'no_credit']);
      expect((await readBalance(redis.client, funded.account))!.held).toBe(50);
      expect(await redis.client.exists(redisKeys.account('no-such-account'))).toBe(0);
    });

    it('counts each held request against its account in order and refuses the one past the budget', async () => {
      const { account } = await makeAccount(redis, 1);
      const holds = new HoldQueue(redis.client);
      const check = rateCheck(account, { requestsPerMinute: 2, tokensPerMinute: 1_000, concurrentRequests: 0 }, 30);
      const results = await Promise.all(['r1', 'r2', 'r3'].map((id) => holds.hold({ hold: ask(account, id), rate: check })));
      expect(results.map((r) => (r.kind === 'rate_limited' ? 'refused' : r.kind === 'held' ? r.rate!.requests : r.kind))).toEqual([1, 2, 'refused']);
      expect(await redis.client.hgetall(check.key)).toEqual({ requests: '2', tokens: '60' });
      expect(await redis.client.pttl(check.key)).toBeGreaterThan(0);
      expect((await readBalance(redis.client, account))!.held).toBe(100);
    });

    onOneServer('charges settlements in order, each at most what is left, and adds them to the day\'s totals per model', async () => {
      const { account } = await makeAccount(redis, 0.0001); // 100 micro-units
      for (const id of ['s1', 's2', 's3']) await holdCredit(redis.client, { account, requestId: id, ttlMs: 60_000, prices, promptTokens: 1, n: 1, maxReplyTokens: 1 });
      const queue = new SettlementQueue(redis.client);
      const before = await scriptCalls();
      await Promise.all([
        queue.settle({ ...settlement(account, 's1', 40), model: 'a' }),
        queue.settle({ ...settlement(account, 's2', 40), model: 'b' }),
        queue.settle({ ...settlement(account, 's3', 40), model: 'a' }),
      ]);
      expect((await scriptCalls()) - before).toBe(1);
      const charged: number[] = [];
      for await (const e of readUsageEvents(redis.client, account)) charged.push(e.charged);
      expect(charged).toEqual([40, 40, 20]);
      expect(await readBalance(redis.client, account)).toEqual({ granted: 0, toppedUp: 0, held: 0 });
      const day = redisKeys.dailyUsage(account, utcDay(Date.now()));
      expect(await redis.client.hgetall(day)).toEqual({
        'a\tchat\tdefault\trequests': '2', 'a\tchat\tdefault\tprompt_tokens': '20', 'a\tchat\tdefault\tcached_tokens': '0', 'a\tchat\tdefault\tcompletion_tokens': '20', 'a\tchat\tdefault\tcost': '60',
        'b\tchat\tdefault\trequests': '1', 'b\tchat\tdefault\tprompt_tokens': '10', 'b\tchat\tdefault\tcached_tokens': '0', 'b\tchat\tdefault\tcompletion_tokens': '10', 'b\tchat\tdefault\tcost': '40',
      });
      expect(await redis.client.ttl(day)).toBeGreaterThan(399 * 86400);
    });

    // A batch names each key once and its items point at them: two accounts interleaved must not swap keys.
    onOneServer('holds and settles a batch that interleaves two accounts, each on its own keys', async () => {
      const a = await makeAccount(redis, 1);
      const b = await makeAccount(redis, 1);
      const items: [string, string, number][] = [[a.account, 'ia1', 30], [b.account, 'ib1', 40], [b.account, 'ib2', 20], [a.account, 'ia2', 50]];
      const holds = new HoldQueue(redis.client);
      const held = await Promise.all(items.map(([account, id]) => holds.hold({ hold: ask(account, id), rate: rateCheck(account, { requestsPerMinute: 10, tokensPerMinute: 1_000, concurrentRequests: 0 }, 30) })));
      expect(held.map((h) => h.kind)).toEqual(['held', 'held', 'held', 'held']);
      expect(await redis.client.hgetall(redisKeys.holdAmounts(a.account))).toEqual({ ia1: '50', ia2: '50' });
      expect(await redis.client.hgetall(redisKeys.holdAmounts(b.account))).toEqual({ ib1: '50', ib2: '50' });
      expect(await settleHolds(redis.client, items.map(([account, id, cost]) => settlement(account, id, cost)))).toEqual([{ charged: 30 }, { charged: 40 }, { charged: 20 }, { charged: 50 }]);
      expect(await readBalance(redis.client, a.account)).toEqual({ granted: 1_000_000 - 80, toppedUp: 0, held: 0 });
      expect(await readBalance(redis.client, b.account)).toEqual({ granted: 1_000_000 - 60, toppedUp: 0, held: 0 });
      const events = async (account: string) => {
        const ids: string[] = [];
        for await (const e of readUsageEvents(redis.client, account)) ids.push(`${e.requestId} ${e.charged}`);
        return ids;
      };
      expect(await events(a.account)).toEqual(['ia1 30', 'ia2 50']);
      expect(await events(b.account)).toEqual(['ib1 40', 'ib2 20']);
      const today = utcDay(Date.now());
      expect(await redis.client.hget(redisKeys.dailyUsage(a.account, today), 'm\tchat\tdefault\tcost')).toBe('80');
      expect(await redis.client.hget(redisKeys.dailyUsage(b.account, today), 'm\tchat\tdefault\tcost')).toBe('60');
      // A later settlement adds to the totals its model has for the day already.
      await holdCredit(redis.client, ask(a.account, 'ia3'));
      expect(await settleHolds(redis.client, [settlement(a.account, 'ia3', 5)])).toEqual([{ charged: 5 }]);
      expect(await redis.client.hmget(redisKeys.dailyUsage(a.account, today), 'm\tchat\tdefault\trequests', 'm\tchat\tdefault\tprompt_tokens', 'm\tchat\tdefault\tcost')).toEqual(['3', '30', '85']);
    });
  });
});
