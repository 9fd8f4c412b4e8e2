// An account whose hold found its rate window with no room left, its bound
// of requests in flight reached, its balance with nothing available or its
// key's budget with nothing left meets that refusal before its next
// request's body is read (what is in flight, the balance or the budget read
// again first), paced one per REFUSAL_SPACING_MS a replica,
// while every other account is served as before; a window is forgotten when
// its minute ends or its limits change, a balance or a budget as soon as it
// has something.
import { connect } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createApiKey, keySpend, setKeyLimits } from '../../src/accounts/api-keys.js';
import { changeCredit } from '../../src/billing/credit-ledger.js';
import { KnownRefusals, REFUSAL_SPACING_MS } from '../../src/gateway/known-refusals.js';
import { ApiError } from '../../src/protocol/errors.js';
import type { RateLimits } from '../../src/ratelimit/rate-limiter.js';
import { answering, chatCalls, sleep, until, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, startFleetOn, TEST_KEY_SECRET, withGatewayOn, type TestGateway } from '../support/gateway.js';

const messages = [{ role: 'user' as const, content: 'hello' }];
const oneModel = (rateLimits: Record<string, number> = {}) => ([url]: string[]) => ({ rateLimits, models: [modelEntry('m', [{ kind: 'vllm', url }])] });

/** Whole clock minutes are windows: a test starts with ten seconds of its minute left at least. */
async function startWithinOneMinute() {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < 10_000) await new Promise((resolve) => setTimeout(resolve, left + 50));
}

/**
 * A request's head, declaring a body of 100,000 bytes that never comes: resolves to the answer's status and JSON
 * body, or to 'no answer' when none comes within `ms` (the gateway waits for the body it would read).
 */
function answerWithoutBody(url: string, path: string, headers: Record<string, string>, ms = 3000): Promise<{ status: number; body: any } | 'no answer'> {
  const { port, hostname } = new URL(url);
  return new Promise((resolve) => {
    let received = '';
    const socket = connect(Number(port), hostname, () => {
      const head = Object.entries({ ...headers, 'content-type': 'application/json', 'content-length': '100000' }).map(([k, v]) => `${k}: ${v}\r\n`);
      socket.write(`POST ${path} HTTP/1.1\r\nhost: x\r\n${head.join('')}\r\n`);
    });
    const done = (outcome: { status: number; body: any } | 'no answer') => {
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(() => done('no answer'), ms);
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      received += chunk.toString();
      const [head, body = ''] = received.split('\r\n\r\n', 2);
      const length = Number(/content-length: (\d+)/i.exec(head)?.[1]);
      if (body.length >= length) done({ status: Number(head.split(' ')[1]), body: JSON.parse(body) });
    });
  });
}

describe('an account known to be refused', () => {
  it("meets a full rate window before its body is read, in each API's shape, calling nothing, while another account is served", async () => {
    await startWithinOneMinute();
    await withGatewayOn([answering({ prompt_tokens: 5, completion_tokens: 5 })], oneModel({ requestsPerMinute: 2 }), async (gw, [upstream]) => {
      for (const status of [200, 200, 429]) expect((await postChat(gw, { model: 'm', messages, max_tokens: 10 })).status).toBe(status);
      const calls = upstream.received.length;
      const chat = await answerWithoutBody(gw.url, '/v1/chat/completions', { authorization: `Bearer ${gw.apiKey}` });
      expect(chat).toMatchObject({ status: 429, body: { error: { type: 'rate_limit_error', code: 'rate_limit_exceeded' } } });
      const anthropic = await answerWithoutBody(gw.url, '/v1/messages', { 'x-api-key': gw.apiKey, 'anthropic-version': '2023-06-01' });
      expect(anthropic).toMatchObject({ status: 429, body: { type: 'error', error: { type: 'rate_limit_error' } } });
      // count_tokens holds no credit, but is counted in the window: refused alike.
      expect(await answerWithoutBody(gw.url, '/v1/messages/count_tokens', { 'x-api-key': gw.apiKey })).toMatchObject({ status: 429 });
      // The official SDKs, sending 2 MB conversations the replica does not read, get the 429 as their own error.
      const long = [{ role: 'user' as const, content: 'a'.repeat(2_000_000) }];
      const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.apiKey, maxRetries: 0 });
      await expect(openai.chat.completions.create({ model: 'm', messages: long })).rejects.toBeInstanceOf(OpenAI.RateLimitError);
      const claude = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      await expect(claude.messages.create({ model: 'm', max_tokens: 10, messages: long })).rejects.toBeInstanceOf(Anthropic.RateLimitError);
      const limited = await postChat(gw, { model: 'm', messages, max_tokens: 10 });
      expect(limited.status).toBe(429);
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(limited.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      expect(upstream.received.length).toBe(calls);
      const other = await makeAccount(gw.redis, 1);
      expect((await postChat({ url: gw.url, apiKey: other.key }, { model: 'm', messages, max_tokens: 10 })).status).toBe(200);
    });
  });

  it("answers its refusals one per REFUSAL_SPACING_MS, however many it sends at once and to whichever API, and serves another account meanwhile", async () => {
    await startWithinOneMinute();
    await withGatewayOn([answering({ prompt_tokens: 5, completion_tokens: 5 })], oneModel({ requestsPerMinute: 1 }), async (gw) => {
      for (const status of [200, 429]) expect((await postChat(gw, { model: 'm', messages, max_tokens: 10 })).status).toBe(status);
      const other = await makeAccount(gw.redis, 1);
      const sent = 20;
      // Sent at once, to one API and then another: the time to the last answer, and whether all were refused.
      const burst = async (ask: () => Promise<Response>) => {
        const started = performance.now();
        const statuses = await Promise.all(Array.from({ length: sent }, () => ask().then((r) => r.status)));
        return { lastMs: performance.now() - started, refused: statuses.every((s) => s === 429) };
      };
      const chats = burst(() => postChat(gw, { model: 'm', messages, max_tokens: 10 }));
      const started = performance.now();
      const served = await postChat({ url: gw.url, apiKey: other.key }, { model: 'm', messages, max_tokens: 10 });
      const servedMs = performance.now() - started;
      const chat = await chats;
      const batches = await burst(() => fetch(`${gw.url}/v1/batches`, { headers: { authorization: `Bearer ${gw.apiKey}` } }));
      for (const { lastMs, refused } of [chat, batches]) {
        expect(refused).toBe(true);
        expect(lastMs).toBeGreaterThanOrEqual((sent - 1) * REFUSAL_SPACING_MS);
      }
      expect(served.status).toBe(200);
      // The other account did not wait its turn behind them.
      expect(servedMs).toBeLessThan(chat.lastMs);
    });
  });

  it('with nothing available, has its balance read before its body on each of three replicas: a 402 while there is none, and served as soon as there is', async () => {
    const fleet = await startFleetOn([answering({ prompt_tokens: 5, completion_tokens: 5 })], oneModel(), 3);
    try {
      const dry = await makeAccount(fleet.gw.redis, 0);
      const ask = (replica: TestGateway) => postChat({ url: replica.url, apiKey: dry.key }, { model: 'm', messages, max_tokens: 10 });
      for (const replica of fleet.replicas) {
        expect((await ask(replica)).status).toBe(402);
        const known = await answerWithoutBody(replica.url, '/v1/chat/completions', { authorization: `Bearer ${dry.key}` });
        expect(known).toMatchObject({ status: 402, body: { error: { code: 'insufficient_balance' } } });
      }
      // Counting a prompt, and the batch APIs, spend no credit: still served.
      expect((await fetch(`${fleet.gw.url}/v1/batches`, { headers: { authorization: `Bearer ${dry.key}` } })).status).toBe(200);
      const counted = await fetch(`${fleet.gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { 'x-api-key': dry.key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages }) });
      expect(counted.status).toBe(200);
      expect(chatCalls(fleet.upstreams[0])).toBe(0);
      await changeCredit(fleet.gw.redis.client, dry.account, 'grant', 1_000_000, 'top-up');
      for (const replica of fleet.replicas) expect((await ask(replica)).status).toBe(200);
    } finally {
      await fleet.close();
    }
  });
});

describe('an account at its bound of requests in flight', () => {
  it('meets the 429 before its body is read while its requests are still in flight, and is served as soon as one ends', async () => {
    const slow: Script = async (req, res) => {
      await sleep(1500);
      await answering({ prompt_tokens: 5, completion_tokens: 5 })(req, res);
    };
    await withGatewayOn([slow], oneModel({ concurrentRequests: 1 }), async (gw, [upstream]) => {
      const first = postChat(gw, { model: 'm', messages, max_tokens: 10 });
      await until(async () => chatCalls(upstream) === 1);
      const second = await postChat(gw, { model: 'm', messages, max_tokens: 10 });
      expect(second.status).toBe(429);
      const known = await answerWithoutBody(gw.url, '/v1/chat/completions', { authorization: `Bearer ${gw.apiKey}` });
      expect(known).toMatchObject({ status: 429, body: { error: { message: expect.stringContaining('1 requests in flight') } } });
      expect((await first).status).toBe(200);
      // The first counts until its settlement lands, a few ms after its last byte.
      await until(async () => (await postChat(gw, { model: 'm', messages, max_tokens: 10 })).status === 200, 1_000);
      expect(chatCalls(upstream)).toBe(2);
    });
  });
});

describe('a key whose budget is spent', () => {
  it("meets the key's 429 before its body is read, while the account's other keys are served, and is served once the budget is raised", async () => {
    // A prompt of "hi" is held as 18 tokens at 1 micro-unit, each reply token at 2: a reply of 5 tokens costs 28.
    const metered = answering({ prompt_tokens: 18, completion_tokens: 5 });
    await withGatewayOn([metered], oneModel(), async (gw, [upstream]) => {
      const { key, record } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'k', { budget: { limit: 28, period: 'total' } });
      const ask = (apiKey: string) => postChat({ url: gw.url, apiKey }, { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
      expect((await ask(key)).status).toBe(200);
      await until(async () => (await keySpend(gw.redis.client, record)).spent === 28);
      expect((await ask(key)).status).toBe(429);
      const calls = chatCalls(upstream);
      const known = await answerWithoutBody(gw.url, '/v1/chat/completions', { authorization: `Bearer ${key}` });
      expect(known).toMatchObject({ status: 429, body: { error: { code: 'insufficient_quota', message: expect.stringContaining("This API key's budget") } } });
      expect((await ask(gw.apiKey)).status).toBe(200);
      await setKeyLimits(gw.redis.client, record.id, { budget: { limit: 100, period: 'total' } });
      await until(async () => (await ask(key)).status === 200, 2_000);
      expect(chatCalls(upstream)).toBe(calls + 2);
    });
  });
});

describe('KnownRefusals', () => {
  afterEach(() => void vi.useRealTimers());
  const limits: RateLimits = { requestsPerMinute: 2, tokensPerMinute: 1000, concurrentRequests: 0 };
  const use = { limits, requests: 2, tokens: 20, resetSeconds: 30 };
  // A full window needs no Redis.
  const refusals = () => new KnownRefusals({} as Redis);
  const asking = (account: string, own: Partial<RateLimits> = {}) => ({ account, keyId: 'k', budget: null, limits: own });

  it('forgets a full window when its minute ends, or when the limits it was full under change', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2026-11-30T10:00:10Z'));
    const known = refusals();
    known.heardWindow('a', use);
    await expect(known.refusalBeforeBody(asking('a'), limits, true)).rejects.toBeInstanceOf(ApiError);
    expect(known.refusalBeforeBody(asking('a', { requestsPerMinute: 3 }), limits, true)).toBeUndefined();
    known.heardWindow('a', use);
    vi.setSystemTime(new Date('2026-11-30T10:01:00Z'));
    expect(known.refusalBeforeBody(asking('a'), limits, true)).toBeUndefined();
  });

  it('remembers a window only when no request fits: its requests, or its tokens, at the limit', async () => {
    const known = refusals();
    known.heardWindow('room', { ...use, requests: 1, tokens: 999 });
    expect(known.refusalBeforeBody(asking('room'), limits, true)).toBeUndefined();
    known.heardWindow('tokens', { ...use, requests: 1, tokens: 1000 });
    await expect(known.refusalBeforeBody(asking('tokens'), limits, true)).rejects.toMatchObject({ status: 429, message: expect.stringContaining('1000 tokens per minute') });
  });
});
