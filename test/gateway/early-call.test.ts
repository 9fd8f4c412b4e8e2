// The upstream called beside the credit hold (gateway/dispatch.ts), on a
// real 3-primary Redis Cluster: a test pauses the writes of the primary that
// holds the account (CLIENT PAUSE … WRITE), so that its hold waits on cue
// while the endpoint's slots, on another primary, are still taken. A key
// whose last hold was granted in full reaches its upstream during the pause;
// nothing reaches the client before the hold is in; a hold refused or
// granted for fewer tokens cancels the early call.
import type { ServerResponse } from 'node:http';
import type { Cluster, Redis } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { changeCredit, readBalance } from '../../src/billing/credit-ledger.js';
import { redisKeys } from '../../src/redis/keys.js';
import { startClusterAsTestRedis } from '../support/redis-topologies.js';
import { answering, sleep, startFakeUpstream, until, type FakeUpstream, type ReceivedRequest } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, startGatewaysOn, startTestGateway, type TestGateway } from '../support/gateway.js';

const messages = [{ role: 'user' as const, content: 'hello' }];
const PAUSE_MS = 600;
const ANSWERED = answering({ prompt_tokens: 5, completion_tokens: 5 });

describe('the upstream call beside the credit hold', () => {
  let upstream: FakeUpstream;
  let gw: TestGateway;
  beforeAll(async () => {
    startGatewaysOn(startClusterAsTestRedis);
    upstream = await startFakeUpstream(ANSWERED);
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
  });
  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  /** The primary that holds `key`. */
  function primaryOf(key: string): Redis {
    const cluster = gw.redis.client as unknown as Cluster;
    const [owner] = cluster.slots[calculateSlot(key)];
    return cluster.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner)!;
  }

  /** A key of a new account with `credit`, on another primary than the endpoint's slots. */
  async function newKey(credit = 1) {
    const slots = primaryOf(redisKeys.endpointSlots(`m ${upstream.url}`).flexLeases);
    for (;;) {
      const { account, key } = await makeAccount(gw.redis, credit);
      if (primaryOf(redisKeys.account(account)) !== slots) return { account, client: { url: gw.url, apiKey: key } };
    }
  }

  /** A key of a new account with `credit`, its first request served: its last hold was granted in full. */
  async function keyHeldInFull(credit = 1) {
    const { account, client } = await newKey(credit);
    expect((await postChat(client, { model: 'm', messages, max_tokens: 10 })).status).toBe(200);
    await until(async () => (await total(account)).held === 0);
    return { account, client };
  }

  /** The chat requests the upstream got (the gateways' health probes aside). */
  const chatCalls = () => upstream.received.filter((r) => r.path.endsWith('/chat/completions'));

  /** Sends a request while the account's primary takes no writes for PAUSE_MS: the requests the upstream got meanwhile, and the reply once the pause is over. */
  async function duringHoldPause(account: string, client: { url: string; apiKey: string }, body: unknown) {
    const seen = chatCalls().length;
    const pausedAt = Date.now();
    await primaryOf(redisKeys.account(account)).call('CLIENT', 'PAUSE', String(PAUSE_MS), 'WRITE');
    const reply = postChat(client, body);
    await sleep(PAUSE_MS / 2);
    const duringPause = chatCalls().slice(seen);
    const res = await reply;
    return { duringPause, res, answeredAfterMs: Date.now() - pausedAt, all: chatCalls().slice(seen) };
  }

  /** Leaves requests asking `maxTokens` unanswered, answering the others; `left` resolves when the gateway hangs up on one. */
  function stallingAt(maxTokens: number) {
    let hungUp: () => void = () => {};
    const left = new Promise<void>((resolve) => (hungUp = resolve));
    upstream.setScript((req: ReceivedRequest, res: ServerResponse) => {
      if (req.body.max_tokens !== maxTokens) return ANSWERED(req, res);
      res.on('close', hungUp);
    });
    return left;
  }

  const total = async (account: string) => {
    const b = (await readBalance(gw.redis.client, account))!;
    return { available: b.granted + b.toppedUp - b.held, held: b.held };
  };

  it('reaches the upstream while the hold waits on Redis, once the key\'s last hold was granted in full, and answers after the hold', async () => {
    const { account, client } = await keyHeldInFull();
    for (const stream of [false, true]) {
      const before = await total(account);
      const { duringPause, res, answeredAfterMs } = await duringHoldPause(account, client, { model: 'm', messages, max_tokens: 10, stream });
      expect(duringPause).toHaveLength(1);
      expect(res.status).toBe(200);
      // A stream's head too waits for the hold.
      expect(answeredAfterMs).toBeGreaterThanOrEqual(PAUSE_MS - 50);
      expect(await res.text()).toContain('reply 0');
      await until(async () => (await total(account)).held === 0);
      expect(before.available - (await total(account)).available).toBe(5 * 1 + 5 * 2);
    }
  });

  it("waits for the hold on a key's first request", async () => {
    const { account, client } = await newKey();
    const { duringPause, res } = await duringHoldPause(account, client, { model: 'm', messages, max_tokens: 10 });
    expect(duringPause).toHaveLength(0);
    expect(res.status).toBe(200);
  });

  it('cancels the early call when the hold is refused, charges nothing, and waits for the hold on the next request', async () => {
    const { account, client } = await keyHeldInFull();
    await changeCredit(gw.redis.client, account, 'deduct', (await total(account)).available, 'spent elsewhere');
    const hungUp = stallingAt(10);
    try {
      const { duringPause, res } = await duringHoldPause(account, client, { model: 'm', messages, max_tokens: 10 });
            expect(duringPause).toHaveLength(1);
      expect(res.status).toBe(402);
      await hungUp;
      // Operators tell such a call from one whose client left.
      const metrics = await (await fetch(`${gw.url}/metrics`)).text();
      expect(metrics).toMatch(/gen_ai_client_operation_duration_count\{[^}]*error_type="early_call_abandoned"[^}]*\} 1\n/);
      const next = await duringHoldPause(account, client, { model: 'm', messages, max_tokens: 10 });
      expect(next.all).toHaveLength(0);
      expect(next.res.status).toBe(402);
      expect(await total(account)).toEqual({ available: 0, held: 0 });
    } finally {
      upstream.setScript(ANSWERED);
    }
  });

  it("keeps three replicas' early calls within one wasted call per replica when they share a key's rate limit", async () => {
    // A window is a clock minute: the test's requests stay in one.
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 15_000) await sleep(left + 50);
    const config = { rateLimits: { requestsPerMinute: 4 }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] };
    const replicas = await Promise.all([0, 1, 2].map(() => startTestGateway(config, { redis: gw.redis })));
    try {
      const { account, client } = await newKey();
      const seen = chatCalls().length;
      const statuses: number[] = [];
      for (let i = 0; i < 9; i++) {
        const { res } = await duringHoldPause(account, { ...client, url: replicas[i % 3].url }, { model: 'm', messages, max_tokens: 10 });
        statuses.push(res.status);
      }
      expect(statuses).toEqual([200, 200, 200, 200, 429, 429, 429, 429, 429]);
      // Each replica's first request waits for its hold. The 4th goes early and is served; the 5th and 6th go
      // early on what their replicas last saw (1 and 2 of 4) and are cancelled; after that each replica knows.
      expect(chatCalls().length - seen).toBe(4 + 2);
      await until(async () => (await total(account)).held === 0);
      expect(1_000_000 - (await total(account)).available).toBe(4 * (5 * 1 + 5 * 2));
    } finally {
      await Promise.all(replicas.map((r) => r.close()));
    }
  });

  it('sends the request again with the lower limit when the hold pays for fewer reply tokens than the early call asked', async () => {
    const { account, client } = await keyHeldInFull();
    // 1,000 micro-units left: the prompt and a few hundred reply tokens at 2 per token, short of 3,000.
    await changeCredit(gw.redis.client, account, 'deduct', (await total(account)).available - 1_000, 'spent elsewhere');
    const hungUp = stallingAt(3_000);
    try {
      const { duringPause, res, all } = await duringHoldPause(account, client, { model: 'm', messages, max_tokens: 3_000 });
      expect(duringPause.map((r) => r.body.max_tokens)).toEqual([3_000]);
      expect(res.status).toBe(200);
      expect((await res.json()).choices[0].message.content).toBe('reply 0');
      expect(all).toHaveLength(2);
      expect(all[1].body.max_tokens).toBeLessThan(500);
      await hungUp;
      await until(async () => (await total(account)).held === 0);
      expect((await total(account)).available).toBe(1_000 - (5 * 1 + 5 * 2));
    } finally {
      upstream.setScript(ANSWERED);
    }
  });
});
