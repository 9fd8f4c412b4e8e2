// Redis's memory: `parley serve` refuses a Redis that would evict its keys
// when full (a memory limit and any policy but noeviction), on one server
// and on each primary of a cluster, and starts on one without a limit or
// that refuses writes when full; a full one turns requests away with a 503
// that charges nothing and calls no upstream, says why in the log, and
// serves again once there is room.
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { answering, chatCalls, startFakeUpstream } from '../support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway } from '../support/gateway.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';
import { startClusterAsTestRedis } from '../support/redis-topologies.js';

// Its endpoint is never called: only the start is.
const config = { models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] };

async function setPolicy(client: Pick<TestRedis['client'], 'config'>, policy: string, maxmemory: string) {
  await client.config('SET', 'maxmemory-policy', policy);
  await client.config('SET', 'maxmemory', maxmemory);
}

describe('a Redis that evicts keys when full', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(() => redis?.stop());

  it('is refused with the setting to change, for allkeys and volatile policies alike', async () => {
    for (const policy of ['allkeys-lru', 'volatile-lru', 'volatile-ttl']) {
      await setPolicy(redis.client, policy, '64mb');
      await expect(startTestGateway(config, { redis })).rejects.toThrow(`evicts keys when it reaches its memory limit (maxmemory-policy ${policy})`);
    }
  });

  it('is served where it has no memory limit, or refuses writes when full', async () => {
    for (const [policy, maxmemory] of [['volatile-lru', '0'], ['noeviction', '64mb']]) {
      await setPolicy(redis.client, policy, maxmemory);
      const gateway = await startTestGateway(config, { redis });
      await gateway.close();
    }
  });
});

describe('a full Redis that refuses writes', () => {
  it('turns requests away with a 503 that charges nothing and calls no upstream, logs why, and serves once there is room', async () => {
    const upstream = await startFakeUpstream(answering({ prompt_tokens: 3, completion_tokens: 1 }));
    const gateway = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const warn = vi.spyOn(console, 'warn');
    try {
      const chat = (stream: boolean) => postChat(gateway, { model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] });
      expect((await chat(false)).status).toBe(200);
      const { client } = gateway.redis;
      // The first chat's settlement lands a moment after its reply.
      await expect.poll(async () => (await readBalance(client, gateway.account))!.held).toBe(0);
      const used = Number(/^used_memory:(\d+)/m.exec(await client.info('memory'))![1]);
      await setPolicy(client, 'noeviction', String(used - 100_000));
      const [balance, calls] = [await readBalance(client, gateway.account), chatCalls(upstream)];
      for (const stream of [false, true, false]) {
        const refused = await chat(stream);
        expect(refused.status).toBe(503);
        expect((await refused.json()).error.type).toBe('service_unavailable');
      }
      expect(chatCalls(upstream)).toBe(calls);
      expect(await readBalance(client, gateway.account)).toEqual(balance);
      const said = warn.mock.calls.map(([line]) => String(line)).filter((line) => line.includes('Redis did not take'));
      expect(said).toHaveLength(1);
      expect(said[0]).toContain('OOM');
      await setPolicy(client, 'noeviction', '0');
      expect((await chat(true)).status).toBe(200);
    } finally {
      warn.mockRestore();
      await gateway.close();
      await upstream.close();
    }
  });
});

describe('a Redis Cluster one of whose primaries evicts', () => {
  let cluster: TestRedis;
  beforeAll(async () => {
    cluster = await startClusterAsTestRedis();
  });
  afterAll(() => cluster?.stop());

  it('is refused, naming that primary', async () => {
    const [, evicting] = (cluster.client as unknown as Cluster).nodes('master');
    await setPolicy(evicting, 'allkeys-lfu', '64mb');
    await expect(startTestGateway(config, { redis: cluster })).rejects.toThrow(`the primary at ${evicting.options.host}:${evicting.options.port}`);
    await setPolicy(evicting, 'noeviction', '64mb');
    const gateway = await startTestGateway(config, { redis: cluster });
    await gateway.close();
  });
});
