// Prepaid credit through Parley with the real `openai` client, on a real
// redis-server, a real 3-primary Redis Cluster and a real primary behind
// Sentinel: exact charges, holds, the 402, concurrency, interrupted replies,
// failover, settlement across a Redis restart (on the one server).
import { redisKeys } from '../../src/redis/keys.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { usageEventsOf } from '../support/ledger.js';
import { answering, chunk, completionBody, replyJson, sleep, startFakeUpstream, until, writeEvents, type FakeUpstream, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, startTestGateway, withGatewayOn, type TestGateway } from '../support/gateway.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';
import { startClusterAsTestRedis, startSentinelsAsTestRedis } from '../support/redis-topologies.js';

const messages = [{ role: 'user' as const, content: 'hello' }];
// Prices with fractions, so that rounding is exercised: per million tokens.
const PRICES = { inputCacheMiss: 0.27, inputCacheHit: 0.07, output: 1.1 };

async function balance(redis: TestRedis, account: string) {
  const b = (await readBalance(redis.client, account))!;
  return { total: b.granted + b.toppedUp, held: b.held };
}

const events = (redis: TestRedis, account: string) => usageEventsOf(redis.client, account);

const TOPOLOGIES = [
  { topology: 'one redis-server', oneServer: true, start: startTestRedis },
  { topology: 'a 3-primary Redis Cluster', oneServer: false, start: startClusterAsTestRedis },
  { topology: 'a primary and a replica behind 3 sentinels', oneServer: false, start: startSentinelsAsTestRedis },
];

describe.each(TOPOLOGIES)('on $topology', ({ oneServer, start }) => {
  // The topology's gateways share one Redis (each with an account of its own): a sentinel set takes seconds to
  // start, and started for each gateway it made this file a minute long.
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await start();
  });
  afterAll(() => redis.stop());

  describe('charges', () => {
    let upstream: FakeUpstream;
    let gw: TestGateway;
    beforeAll(async () => {
      upstream = await startFakeUpstream(answering({ prompt_tokens: 1001, cached: 600, completion_tokens: 150 }));
      gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }], { pricesPerMillion: PRICES })] }, { redis });
    });
    afterAll(async () => {
      await gw.close();
      await upstream.close();
    });

    // 401 uncached × 0.27 + 600 cached × 0.07 + 150 completion (3 replies) × 1.1 = 315.27 micro-units, rounded up once.
    const EXPECTED_COST = 316;

    it('charges cached prompt tokens at the hit price and every one of n replies, rounded up once per request', async () => {
      const before = await balance(gw.redis, gw.account);
      const reply = await gw.client.chat.completions.create({ model: 'm', messages, n: 3 });
      expect(reply.choices).toHaveLength(3);
      expect(reply.usage).toMatchObject({ prompt_tokens: 1001, completion_tokens: 150, prompt_tokens_details: { cached_tokens: 600 } });
      await until(async () => (await balance(gw.redis, gw.account)).total !== before.total);
      expect(await balance(gw.redis, gw.account)).toEqual({ total: before.total - EXPECTED_COST, held: 0 });
      const [event] = (await events(gw.redis, gw.account)).slice(-1);
      expect(event).toMatchObject({ outcome: 'complete', model: 'm', promptTokens: 1001, cachedTokens: 600, completionTokens: 150, cost: EXPECTED_COST, charged: EXPECTED_COST });
      expect(event.endpoint).toContain(upstream.url);
    });

    it('charges a streamed reply the same, with or without the usage chunk', async () => {
      for (const include_usage of [true, false]) {
        const before = await balance(gw.redis, gw.account);
        const stream = await gw.client.chat.completions.create({ model: 'm', messages, n: 3, stream: true, stream_options: { include_usage } });
        for await (const _ of stream);
        await until(async () => (await balance(gw.redis, gw.account)).total !== before.total);
        expect((await balance(gw.redis, gw.account)).total).toBe(before.total - EXPECTED_COST);
      }
    });

    it('shows the balance in DeepSeek\'s shape', async () => {
      const b = await balance(gw.redis, gw.account);
      const res = await fetch(`${gw.url}/user/balance`, { headers: { authorization: `Bearer ${gw.apiKey}` } });
      expect(res.status).toBe(200);
      const body = await res.json();
      expect(body.is_available).toBe(true);
      expect(body.balance_infos[0]).toMatchObject({ currency: 'USD', total_balance: (b.total / 1e6).toFixed(6).replace(/0+$/, ''), granted_balance: (b.total / 1e6).toFixed(6).replace(/0+$/, ''), topped_up_balance: '0.00' });
    });

    it('refuses with 402 and calls no upstream when the account has no credit', async () => {
      const empty = await makeAccount(gw.redis, 0);
      const calls = upstream.received.length;
      const res = await postChat({ url: gw.url, apiKey: empty.key }, { model: 'm', messages });
      expect(res.status).toBe(402);
      expect((await res.json()).error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_balance' });
      expect(upstream.received.length).toBe(calls);
      expect(await balance(gw.redis, empty.account)).toEqual({ total: 0, held: 0 });
    });

    it('lowers max_tokens sent upstream to what a short balance can pay', async () => {
      // 100 micro-units: the ~30-token bounded prompt at 0.27 leaves about 82 output tokens at 1.1.
      const short = await makeAccount(gw.redis, 0.0001);
      await postChat({ url: gw.url, apiKey: short.key }, { model: 'm', messages, max_tokens: 1000 });
      const sent = upstream.received.at(-1)!.body;
      expect(sent.max_tokens).toBeGreaterThan(50);
      expect(sent.max_tokens).toBeLessThan(100);
      // Settlement lands just after the reply.
      await until(async () => (await balance(gw.redis, short.account)).held === 0);
      expect((await balance(gw.redis, short.account)).total).toBeGreaterThanOrEqual(0);
    });
  });

  describe('usage event retention', () => {
    it('follows the routing file: events older than billing.usageRetentionDays go as new ones are settled', async () => {
      await withGatewayOn([answering({ prompt_tokens: 10, completion_tokens: 5 })], ([url]) => ({ billing: { usageRetentionDays: 30 }, models: [modelEntry('m', [{ kind: 'vllm', url }], { pricesPerMillion: PRICES })] }), async (gw) => {
        await gw.redis.client.xadd(redisKeys.usageEvents(gw.account), '1000-0', 'request_id', 'from-1970');
        await gw.client.chat.completions.create({ model: 'm', messages });
        await until(async () => (await events(gw.redis, gw.account)).some((e) => e.outcome === 'complete'));
        expect((await events(gw.redis, gw.account)).map((e) => e.outcome)).toEqual(['complete']);
      }, { redis });
    });
  });

  describe('an upstream that streams no usage', () => {
    it('is metered by the pieces it streamed, and the client\'s usage chunk says the same', async () => {
      const pieces = ['one', ' two', '', ' three'];
      const noUsage: Script = (_req, res) =>
        writeEvents(res, [
          ...pieces.map((content) => ({ ...chunk({}), choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }] })),
          chunk({}, 'stop'),
        ]);
      const prices = { inputCacheMiss: 1, inputCacheHit: 1, output: 1_000 };
      await withGatewayOn([noUsage], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }], { pricesPerMillion: prices })] }), async (gw) => {
        const stream = await gw.client.chat.completions.create({ model: 'm', messages, stream: true, stream_options: { include_usage: true } });
        let usage;
        for await (const c of stream) usage = c.usage ?? usage;
        // Three pieces with text (the empty one is no token); with no tokenizer, no prompt tokens are claimed.
        expect(usage).toMatchObject({ prompt_tokens: 0, completion_tokens: 3 });
        await until(async () => (await events(gw.redis, gw.account)).length === 1);
        const [event] = await events(gw.redis, gw.account);
        // 3 tokens at 1,000 per million tokens: 3,000 micro-units.
        expect(event).toMatchObject({ outcome: 'complete', completionTokens: 3, charged: 3_000 });
      }, { redis });
    });
  });

  describe('concurrency', () => {
    it('50 concurrent requests on a balance that pays for about 10: never below zero, balance + charges = grants', async () => {
      // Every reply takes all the tokens it may, slowly, so that holds overlap.
      const slowFullReply: Script = async (req, res) => {
        await sleep(100);
        const usage = { prompt_tokens: 20, completion_tokens: req.body.max_tokens, total_tokens: 20 + req.body.max_tokens };
        replyJson(res, completionBody('x', usage));
      };
      const prices = { inputCacheMiss: 1, inputCacheHit: 1, output: 10 };
      await withGatewayOn([slowFullReply], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }], { pricesPerMillion: prices })] }), async (gw) => {
        const team = await makeAccount(gw.redis, 0.01); // 10,000 micro-units; a full reply costs 1,000 + 20
        const results = await Promise.all(
          Array.from({ length: 50 }, () => postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages, max_tokens: 100 }).then((r) => r.status)),
        );
        const served = results.filter((s) => s === 200).length;
        expect(results.every((s) => s === 200 || s === 402)).toBe(true);
        expect(served).toBeGreaterThanOrEqual(9);
        expect(served).toBeLessThanOrEqual(11);
        await until(async () => (await balance(gw.redis, team.account)).held === 0);
        const b = await balance(gw.redis, team.account);
        const charged = (await events(gw.redis, team.account)).reduce((sum, e) => sum + e.charged, 0);
        expect(b.total).toBeGreaterThanOrEqual(0);
        expect(b.total + charged).toBe(10_000);
      }, { credit: 0, redis });
    });
  });

  describe('replies that do not complete cost nothing', () => {
    let upstream: FakeUpstream;
    let gw: TestGateway;
    beforeAll(async () => {
      upstream = await startFakeUpstream(() => {});
      gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }, { redis });
    });
    afterAll(async () => {
      await gw.close();
      await upstream.close();
    });

    it('a stream the client abandons mid-reply', async () => {
      upstream.setScript(async (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (let i = 0; i < 200 && !res.destroyed; i++) {
          res.write(`data: ${JSON.stringify(chunk({ content: 'tok ' }))}\n\n`);
          await sleep(10);
        }
        res.end();
      });
      const before = await balance(gw.redis, gw.account);
      const abort = new AbortController();
      const stream = await gw.client.chat.completions.create({ model: 'm', messages, stream: true }, { signal: abort.signal });
      let seen = 0;
      try {
        for await (const _ of stream) if (++seen === 5) abort.abort();
      } catch {
        // the client's own abort
      }
      expect(seen).toBeGreaterThanOrEqual(5);
      await until(async () => (await events(gw.redis, gw.account)).some((e) => e.outcome === 'client_gone'));
      expect(await balance(gw.redis, gw.account)).toEqual(before);
    });

    it('a stream the upstream breaks off', async () => {
      upstream.setScript(async (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'half' }))}\n\n`);
        await sleep(20);
        res.destroy();
      });
      const before = await balance(gw.redis, gw.account);
      const raw = await (await postChat(gw, { model: 'm', messages, stream: true })).text();
      expect(raw).toContain('"type":"server_error"');
      await until(async () => (await events(gw.redis, gw.account)).some((e) => e.outcome === 'broke_off'));
      expect(await balance(gw.redis, gw.account)).toEqual(before);
    });

    it('an upstream that fails before answering', async () => {
      upstream.setScript((_req, res) => {
        replyJson(res, { error: { message: 'bad request', type: 'invalid_request_error' } }, 400);
      });
      const before = await balance(gw.redis, gw.account);
      expect((await postChat(gw, { model: 'm', messages })).status).toBe(400);
      await until(async () => (await events(gw.redis, gw.account)).some((e) => e.outcome === 'failed'));
      expect(await balance(gw.redis, gw.account)).toEqual(before);
    });
  });

  describe('failover', () => {
    it('a request whose first upstream failed before its first byte is served by the next and charged once', async () => {
      const overloaded: Script = (_req, res) => {
        res.writeHead(503);
        res.end('overloaded');
      };
      const config = ([broken, healthy]: string[]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url: broken }, { kind: 'vllm', url: healthy, priority: 1 }])] });
      await withGatewayOn([overloaded, answering({ prompt_tokens: 1000, completion_tokens: 1000 })], config, async (gw, [broken]) => {
        const before = await balance(gw.redis, gw.account);
        const reply = await gw.client.chat.completions.create({ model: 'm', messages });
        expect(reply.choices[0].message.content).toBe('reply 0');
        expect(broken.received).toHaveLength(1);
        await until(async () => (await events(gw.redis, gw.account)).length > 0);
        await sleep(100);
        const all = await events(gw.redis, gw.account);
        expect(all).toHaveLength(1);
        // 1,000 prompt tokens × 1 + 1,000 output tokens × 2 per million.
        expect(await balance(gw.redis, gw.account)).toEqual({ total: before.total - 3_000, held: 0 });
      }, { redis });
    });
  });

  (oneServer ? describe : describe.skip)('Redis restarted mid-run', () => {
    let upstream: FakeUpstream;
    let gw: TestGateway;
    afterEach(async () => {
      await gw?.close();
      await upstream?.close();
    });

    it('fails closed with 503 while it is down, loses and doubles nothing, and serves again when it is back', async () => {
      upstream = await startFakeUpstream(async (_req, res) => {
        await sleep(300);
        replyJson(res, completionBody('x', { prompt_tokens: 1000, completion_tokens: 0 }));
      });
      gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
      const start = await balance(gw.redis, gw.account);
      // One request is in flight (holding credit) when Redis dies; it finishes while Redis is down.
      const inFlight = postChat(gw, { model: 'm', messages });
      await until(async () => (await balance(gw.redis, gw.account)).held > 0);
      await gw.redis.kill();
      const during = await postChat(gw, { model: 'm', messages });
      expect(during.status).toBe(503);
      expect((await during.json()).error.type).toBe('service_unavailable');
      expect(during.headers.get('retry-after')).toBe('1');
      expect((await inFlight).status).toBe(200);
      await gw.redis.restart();
      // The settlement owed for the in-flight reply lands once Redis is back, exactly once.
      await until(async () => (await balance(gw.redis, gw.account).catch(() => start)).total !== start.total, 10_000);
      expect(await balance(gw.redis, gw.account)).toEqual({ total: start.total - 1_000, held: 0 });
      expect((await postChat(gw, { model: 'm', messages })).status).toBe(200);
      await until(async () => (await balance(gw.redis, gw.account)).total === start.total - 2_000);
      expect((await events(gw.redis, gw.account)).filter((e) => e.outcome === 'complete')).toHaveLength(2);
    });
  });
});
