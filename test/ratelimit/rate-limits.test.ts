// Requests and tokens per minute, and requests in flight, per account,
// through Parley with a real redis-server: the 429 and OpenAI's x-ratelimit
// headers.
import { describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/accounts/api-keys.js';
import { setAccountLimits } from '../../src/accounts/accounts.js';
import { batchLineLimits } from '../../src/ratelimit/rate-limiter.js';
import { answering, sleep, until, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, startFleetOn, TEST_KEY_SECRET, withGatewayOn } from '../support/gateway.js';

const messages = [{ role: 'user' as const, content: 'hello' }];
const answer = answering({ prompt_tokens: 5, completion_tokens: 5 });
/** The same answer, `ms` later: requests that stay in flight a while. */
const answerAfter = (ms: number): Script => async (req, res) => {
  await sleep(ms);
  await answer(req, res);
};
/** One model on the scripted upstream, with these rate limits (the routing file's defaults where none). */
const oneModel = (rateLimits: Record<string, number> = {}) => ([url]: string[]) => ({ rateLimits, models: [modelEntry('m', [{ kind: 'vllm', url }])] });

// Windows are whole clock minutes, so a test whose requests straddle a
// minute's end sees its counts start again. Each test starts with at least
// ten seconds of its minute left.
async function startWithinOneMinute() {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < 10_000) await new Promise((resolve) => setTimeout(resolve, left + 50));
}

describe('rate limits', () => {
  it('answers 429 rate_limit_exceeded with Retry-After and OpenAI\'s x-ratelimit headers', async () => {
    await startWithinOneMinute();
    await withGatewayOn([answer], oneModel({ requestsPerMinute: 2 }), async (gw, [upstream]) => {
      const first = await postChat(gw, { model: 'm', messages, max_tokens: 10 });
      expect(first.status).toBe(200);
      expect(first.headers.get('x-ratelimit-limit-requests')).toBe('2');
      expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('1');
      expect(first.headers.get('x-ratelimit-limit-tokens')).toBe('2000000');
      expect(first.headers.get('x-ratelimit-reset-requests')).toMatch(/^\d+s$/);
      expect((await postChat(gw, { model: 'm', messages, max_tokens: 10 })).status).toBe(200);
      const calls = upstream.received.length;
      const limited = await postChat(gw, { model: 'm', messages, max_tokens: 10 });
      expect(limited.status).toBe(429);
      expect((await limited.json()).error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(limited.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      expect(upstream.received.length).toBe(calls);
    });
  });

  it('counts tokens per minute, with an account\'s own limit over the default', async () => {
    await withGatewayOn([answer], oneModel(), async (gw, [upstream]) => {
      const { setAccountLimits } = await import('../../src/accounts/accounts.js');
      const team = await makeAccount(gw.redis, 1);
      await startWithinOneMinute();
      await setAccountLimits(gw.redis.client, team.account, { requestsPerMinute: null, tokensPerMinute: 500 });
      const ask = () => postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages, max_tokens: 200 });
      const first = await ask();
      expect(first.status).toBe(200);
      expect(first.headers.get('x-ratelimit-limit-tokens')).toBe('500');
      expect((await ask()).status).toBe(200);
      const third = await ask();
      expect(third.status).toBe(429);
      expect((await third.json()).error.message).toContain('500 tokens per minute');
      // One that may take more than a whole minute allows is told so, with no Retry-After, and calls nothing.
      const calls = upstream.received.length;
      const huge = await postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages, max_tokens: 600 });
      expect(huge.status).toBe(429);
      expect(huge.headers.get('retry-after')).toBeNull();
      expect((await huge.json()).error).toMatchObject({ code: 'rate_limit_exceeded', message: expect.stringContaining('Request too large') });
      expect(upstream.received.length).toBe(calls);
    });
  });

  // A member can make keys: a window per key would give each new key the account's limits again.
  it("counts every key of an account in the account's one window, and another account in its own", async () => {
    await withGatewayOn([answer], oneModel({ requestsPerMinute: 3 }), async (gw) => {
      const team = await makeAccount(gw.redis, 1);
      const other = await makeAccount(gw.redis, 1);
      const keys = [team.key, ...(await Promise.all([1, 2, 3].map(async (i) => (await createApiKey(gw.redis.client, TEST_KEY_SECRET, team.account, `extra ${i}`)).key)))];
      await startWithinOneMinute();
      const ask = (apiKey: string) => postChat({ url: gw.url, apiKey }, { model: 'm', messages, max_tokens: 10 });
      const statuses = [];
      for (const key of keys) statuses.push((await ask(key)).status);
      expect(statuses).toEqual([200, 200, 200, 429]);
      const refused = await ask(keys[1]);
      expect(refused.status).toBe(429);
      expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      const otherFirst = await ask(other.key);
      expect(otherFirst.status).toBe(200);
      expect(otherFirst.headers.get('x-ratelimit-remaining-requests')).toBe('2');
    });
  });

  it("holds an account's keys to its one window across three replicas, requests sent at once", async () => {
    const fleet = await startFleetOn([answer], oneModel({ requestsPerMinute: 6 }), 3);
    try {
      const team = await makeAccount(fleet.gw.redis, 1);
      const keys = [team.key, ...(await Promise.all([1, 2].map(async (i) => (await createApiKey(fleet.gw.redis.client, TEST_KEY_SECRET, team.account, `extra ${i}`)).key)))];
      await startWithinOneMinute();
      const statuses = await Promise.all(Array.from({ length: 18 }, (_, i) => postChat({ url: fleet.replicas[i % 3].url, apiKey: keys[Math.floor(i / 3) % 3] }, { model: 'm', messages, max_tokens: 10 }).then((r) => r.status)));
      expect(statuses.filter((s) => s === 200)).toHaveLength(6);
      expect(statuses.filter((s) => s === 429)).toHaveLength(12);
    } finally {
      await fleet.close();
    }
  });

  it("bounds an account's requests in flight across three replicas; one ended lets the next in, and another account has its own bound", async () => {
    const fleet = await startFleetOn([answerAfter(400)], oneModel({ concurrentRequests: 2 }), 3);
    try {
      const ask = (i: number, apiKey = fleet.gw.apiKey) => postChat({ url: fleet.replicas[i % 3].url, apiKey }, { model: 'm', messages, max_tokens: 10 });
      const other = await makeAccount(fleet.gw.redis, 1);
      const sent = Array.from({ length: 6 }, (_, i) => ask(i));
      await sleep(100);
      // While the account has its two in flight, another's two go in.
      const others = [ask(0, other.key), ask(1, other.key)];
      const answers = await Promise.all(sent);
      expect(answers.filter((r) => r.status === 200)).toHaveLength(2);
      const refused = answers.filter((r) => r.status === 429);
      expect(refused).toHaveLength(4);
      expect(refused[0].headers.get('retry-after')).toBe('1');
      expect((await refused[0].json()).error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded', message: expect.stringContaining('2 requests in flight') });
      expect((await Promise.all(others)).map((r) => r.status)).toEqual([200, 200]);
      // Its two have ended (and settled): the next goes in.
      await until(async () => (await ask(2)).status === 200);
    } finally {
      await fleet.close();
    }
  });

  it("takes an account's own bound of requests in flight over the routing file's, and gives batch lines half of it", async () => {
    await withGatewayOn([answerAfter(300)], oneModel({ concurrentRequests: 8 }), async (gw) => {
      await setAccountLimits(gw.redis.client, gw.account, { requestsPerMinute: null, tokensPerMinute: null, concurrentRequests: 1 });
      const other = await makeAccount(gw.redis, 1);
      // Its key was looked up before the change, and replicas take a change within a minute: a new key sees it now.
      const { key } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'after the change');
      const statuses = await Promise.all([key, key, other.key, other.key].map((apiKey) => postChat({ url: gw.url, apiKey }, { model: 'm', messages, max_tokens: 10 }).then((r) => r.status)));
      expect(statuses.slice(0, 2).sort()).toEqual([200, 429]);
      expect(statuses.slice(2)).toEqual([200, 200]);
    });
    expect(batchLineLimits({ requestsPerMinute: 10, tokensPerMinute: 100, concurrentRequests: 5 }).concurrentRequests).toBe(2);
    expect(batchLineLimits({ requestsPerMinute: 10, tokensPerMinute: 100, concurrentRequests: 0 }).concurrentRequests).toBe(0);
  });
});
