// API keys through Parley with a real redis-server and the real `openai`
// client: every 401 case, revocation reaching every replica within a
// second, revocations missed while the subscription was down, no raw key
// kept in memory, and how many keys an account keeps.
import { connect, createServer, type Socket } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyAuthenticator } from '../../src/accounts/key-authenticator.js';
import { createApiKey, listApiKeys, MAX_LIVE_KEYS, revokeApiKey, REVOKED_KEYS_KEPT, TooManyKeys } from '../../src/accounts/api-keys.js';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { connectRedis } from '../../src/redis/connection.js';
import { redisKeys } from '../../src/redis/keys.js';
import { answering, startFakeUpstream, until, type FakeUpstream } from '../support/fake-upstream.js';
import { asAdmin, makeAccount, modelEntry, postChat, startTestGateway, type TestGateway, TEST_KEY_SECRET } from '../support/gateway.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

const messages = [{ role: 'user' as const, content: 'hello' }];

const balance = async (gw: TestGateway) => (await readBalance(gw.redis.client, gw.account))!;

describe('authentication', () => {
  let upstream: FakeUpstream;
  let gw: TestGateway;
  beforeAll(async () => {
    upstream = await startFakeUpstream(answering({ prompt_tokens: 5, completion_tokens: 5 }));
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
  });
  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  const cases: [string, Record<string, string>][] = [
    ['no Authorization header', {}],
    ['a scheme other than Bearer', { authorization: 'Basic dXNlcjpwYXNz' }],
    ['a malformed key', { authorization: 'Bearer not-a-key' }],
    ['an unknown key', { authorization: `Bearer sk-parley-${'A'.repeat(43)}` }],
  ];
  it.each(cases)('answers 401 invalid_api_key for %s, with no upstream call and no charge', async (_name, headers) => {
    const before = await balance(gw);
    const calls = upstream.received.length;
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ model: 'm', messages }) });
    expect(res.status).toBe(401);
    expect((await res.json()).error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
    expect(upstream.received.length).toBe(calls);
    expect(await balance(gw)).toEqual(before);
  });

  it('answers 401 through the openai client for a revoked key', async () => {
    const team = await makeAccount(gw.redis, 1);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: team.key, maxRetries: 0 });
    await client.chat.completions.create({ model: 'm', messages });
    expect(await revokeApiKey(gw.redis.client, team.keyId)).toBe(true);
    await until(async () => (await postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages })).status === 401, 1_000);
    await expect(client.chat.completions.create({ model: 'm', messages })).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
  });

  it('keeps no raw key in its in-process caches', async () => {
    const auth = await KeyAuthenticator.start(gw.redis.client, TEST_KEY_SECRET);
    try {
      const team = await makeAccount(gw.redis, 1);
      expect(await auth.authenticate(`Bearer ${team.key}`)).toMatchObject({ account: team.account });
      expect(await auth.authenticate(`Bearer ${team.key}`)).toMatchObject({ account: team.account });
      const caches = Object.values(auth).filter((v): v is Map<string, unknown> => typeof (v as Map<string, unknown>)?.entries === 'function');
      expect(caches.length).toBeGreaterThan(0);
      const held = JSON.stringify(caches.flatMap((c) => [...c.entries()]));
      expect(held).toContain(team.keyId);
      expect(held).not.toContain(team.key);
    } finally {
      await auth.close();
    }
  });

  it('a tenant sending more made-up keys than it remembers leaves its caches bounded and a real key served', async () => {
    const auth = await KeyAuthenticator.start(gw.redis.client, TEST_KEY_SECRET);
    try {
      const team = await makeAccount(gw.redis, 1);
      expect(await auth.authenticate(`Bearer ${team.key}`)).toMatchObject({ account: team.account });
      for (let i = 0; i < 10_500; i += 500) {
        const made = Array.from({ length: 500 }, (_, j) => `Bearer sk-parley-${String(i + j).padStart(43, 'x')}`);
        for (const refused of await Promise.all(made.map((h) => auth.authenticate(h)))) expect(refused).toHaveProperty('refused');
      }
      // The key HMACs remembered stay at 10,000; the lookups (each made-up key's 'unknown') at most 100,000.
      const sizes = auth.remembered();
      expect(sizes.keyHmacs).toBe(10_000);
      expect(sizes.keys).toBe(10_501);
      // The real key still authenticates.
      expect(await auth.authenticate(`Bearer ${team.key}`)).toMatchObject({ account: team.account });
    } finally {
      await auth.close();
    }
  });

  it('needs a key for the models list and the balance too', async () => {
    for (const path of ['/v1/models', '/v1/models/m', '/user/balance']) {
      expect((await fetch(`${gw.url}${path}`)).status).toBe(401);
    }
  });
});

describe('a revocation reaches every replica within a second', () => {
  it('two gateways on one Redis both refuse the key once it is revoked', async () => {
    const upstream = await startFakeUpstream(answering({ prompt_tokens: 5, completion_tokens: 5 }));
    const config = { models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] };
    const a = await startTestGateway(config);
    const b = await startTestGateway(config, { redis: a.redis });
    try {
      const team = await makeAccount(a.redis, 1);
      for (const gw of [a, b]) expect((await postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages })).status).toBe(200);
      await revokeApiKey(a.redis.client, team.keyId);
      const revokedAt = Date.now();
      for (const gw of [a, b]) {
        await until(async () => (await postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages })).status === 401, 1_000);
      }
      expect(Date.now() - revokedAt).toBeLessThan(1_000);
    } finally {
      await b.close();
      await a.close();
      await upstream.close();
    }
  });
});

// A member makes and revokes keys at will: what is kept of them must stay bounded.
describe("an account's keys", () => {
  it('are made at most MAX_LIVE_KEYS not revoked, even when three replicas make them at once; the admin API answers 409', async () => {
    const upstream = await startFakeUpstream(answering({ prompt_tokens: 5, completion_tokens: 5 }));
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const replicas = await Promise.all([1, 2, 3].map((i) => connectRedis(gw.redis.shared ?? gw.redis.url, `replica-${i}`)));
    try {
      const team = await makeAccount(gw.redis, 1);
      const other = await makeAccount(gw.redis, 1);
      const made = await Promise.allSettled(Array.from({ length: MAX_LIVE_KEYS + 20 }, (_, i) => createApiKey(replicas[i % 3], TEST_KEY_SECRET, team.account, `k${i}`)));
      const refused = made.filter((m) => m.status === 'rejected');
      expect(refused).toHaveLength(21); // makeAccount made one
      for (const r of refused) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(TooManyKeys);
      expect(await listApiKeys(gw.redis.client, team.account)).toHaveLength(MAX_LIVE_KEYS);
      const create = () => fetch(`${gw.url}/admin/v1/accounts/${team.account}/keys`, { method: 'POST', headers: { ...asAdmin, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'one more' }) });
      const over = await create();
      expect(over.status).toBe(409);
      expect((await over.json()).error.message).toContain('revoke one first');
      // Another account makes its own; the account's keys still work; a revocation makes room for one.
      expect((await createApiKey(gw.redis.client, TEST_KEY_SECRET, other.account, 'theirs')).key).toMatch(/^sk-parley-/);
      expect((await postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages })).status).toBe(200);
      expect(await revokeApiKey(gw.redis.client, team.keyId)).toBe(true);
      expect((await create()).status).toBe(200);
      expect((await create()).status).toBe(409);
    } finally {
      for (const r of replicas) r.disconnect();
      await gw.close();
      await upstream.close();
    }
  });

  it('keep only the REVOKED_KEYS_KEPT latest revoked; the records of those before are deleted', async () => {
    const redis = await startTestRedis();
    try {
      const team = await makeAccount(redis, 1);
      const revokedInTurn = [team.keyId];
      await revokeApiKey(redis.client, team.keyId);
      for (let i = 0; i < REVOKED_KEYS_KEPT + 4; i++) {
        const { record } = await createApiKey(redis.client, TEST_KEY_SECRET, team.account, `k${i}`);
        expect(await revokeApiKey(redis.client, record.id)).toBe(true);
        revokedInTurn.push(record.id);
      }
      const live = await createApiKey(redis.client, TEST_KEY_SECRET, team.account, 'live');
      const listed = await listApiKeys(redis.client, team.account);
      expect(listed.map((k) => k.id).sort()).toEqual([...revokedInTurn.slice(5), live.record.id].sort());
      for (const id of revokedInTurn.slice(0, 5)) {
        expect(await redis.client.exists(redisKeys.apiKeyById(id), redisKeys.keyBudget(team.account, id))).toBe(0);
        expect(await revokeApiKey(redis.client, id)).toBe(false);
      }
      // Nothing else of them is left: a key record for each listed key, no more.
      expect(await redis.client.keys('parley:apikey:*')).toHaveLength(REVOKED_KEYS_KEPT + 1);
    } finally {
      await redis.stop();
    }
  });
});

/**
 * A TCP pass-through to Redis that can cut every connection, and swallow
 * what clients send that holds a SUBSCRIBE: a renewal that is never answered.
 */
async function cuttingProxy(port: number) {
  const open = new Set<Socket>();
  const proxy = { port: 0, swallowSubscribes: false, swallowed: 0, cut: () => open.forEach((s) => s.destroy()), close: () => new Promise((r) => server.close(r)) };
  const server = createServer((client) => {
    const redis = connect(port, '127.0.0.1');
    for (const s of [client, redis]) {
      open.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        open.delete(s);
        client.destroy();
        redis.destroy();
      });
    }
    client.on('data', (bytes) => {
      if (proxy.swallowSubscribes && /subscribe/i.test(bytes.toString('latin1'))) proxy.swallowed++;
      else redis.write(bytes);
    });
    redis.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.port = (server.address() as { port: number }).port;
  return proxy;
}

describe('the revocation subscription', () => {
  const subscribers = async (redis: TestRedis) => ((await redis.client.pubsub('NUMSUB', redisKeys.keyRevocations)) as [string, number])[1];
  const refused = async (auth: KeyAuthenticator, key: string) => 'refused' in (await auth.authenticate(`Bearer ${key}`));

  it('forgets the keys it knew when it reconnects, for revocations it missed, and hears later ones', async () => {
    const redis = await startTestRedis();
    const client = await connectRedis(redis.url);
    const auth = await KeyAuthenticator.start(client, TEST_KEY_SECRET);
    try {
      const [missed, later] = [await makeAccount(redis, 1), await makeAccount(redis, 1)];
      for (const team of [missed, later]) expect(await auth.authenticate(`Bearer ${team.key}`)).toMatchObject({ account: team.account });
      // The subscriber is cut off; the revocation is published to no one.
      await redis.client.client('KILL', 'TYPE', 'pubsub');
      await revokeApiKey(redis.client, missed.keyId);
      await until(() => refused(auth, missed.key), 3_000);
      // Subscribed again: a revocation now reaches it by message, the other key still cached.
      await until(async () => (await subscribers(redis)) === 1, 3_000);
      expect(await refused(auth, later.key)).toBe(false);
      await revokeApiKey(redis.client, later.keyId);
      await until(() => refused(auth, later.key), 1_000);
    } finally {
      await auth.close();
      client.disconnect();
      await redis.stop();
    }
  });

  it('stops with no unhandled rejection while a renewal of its subscription is unanswered', async () => {
    const redis = await startTestRedis();
    const proxy = await cuttingProxy(Number(new URL(redis.url).port));
    const client = await connectRedis(`redis://127.0.0.1:${proxy.port}`);
    const auth = await KeyAuthenticator.start(client, TEST_KEY_SECRET);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      proxy.swallowSubscribes = true;
      proxy.cut();
      await until(async () => proxy.swallowed > 0, 3_000);
      await auth.close();
      await new Promise((r) => setTimeout(r, 200));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      client.disconnect();
      await proxy.close();
      await redis.stop();
    }
  });
});
