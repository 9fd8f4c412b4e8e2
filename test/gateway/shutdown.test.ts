// Graceful shutdown: readiness goes false, new requests get a 503, streams in
// flight finish within the grace period and are charged; streams still running
// after it end with the error event and cost nothing; a request whose client
// left while its hold was on the way is settled before Redis is let go.
import { redisKeys } from '../../src/redis/keys.js';
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { chunk, sleep, startFakeUpstream } from '../support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway } from '../support/gateway.js';
import { startTestRedis } from '../support/redis.js';

/** A script that spins for 300 ms; Redis serves nobody else meanwhile. */
const BUSY_300_MS = `local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > 300000`;

const messages = [{ role: 'user' as const, content: 'hello' }];

/** Streams `count` chunks, one every `everyMs`, then usage and [DONE]. */
const streaming = (count: number, everyMs: number) =>
  startFakeUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < count && !res.destroyed; i++) {
      res.write(`data: ${JSON.stringify(chunk({ content: `t${i} ` }))}\n\n`);
      await sleep(everyMs);
    }
    res.write(`data: ${JSON.stringify({ ...chunk({}, 'stop'), usage: { prompt_tokens: 1000, completion_tokens: count, total_tokens: 1000 + count } })}\n\n`);
    res.end('data: [DONE]\n\n');
  });

/** A gateway with one stream in flight on an upstream that streams `count` chunks, one every `everyMs`. */
async function streamInFlight(count: number, everyMs: number) {
  const upstream = await streaming(count, everyMs);
  const redis = await startTestRedis();
  const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }, { redis });
  const before = (await readBalance(gw.redis.client, gw.account))!;
  const body = (await postChat(gw, { model: 'm', messages, stream: true })).text();
  await sleep(100);
  const after = async () => {
    const h = await redis.client.hgetall(redisKeys.account(gw.account));
    return { granted: Number(h.granted), held: Number(h.held) };
  };
  return { gw, before, body, after, cleanup: () => Promise.all([redis.stop(), upstream.close()]) };
}

describe('graceful shutdown', () => {
  it('finishes a stream within the grace period and charges it, while refusing new work', async () => {
    const { gw, before, body, after, cleanup } = await streamInFlight(10, 50);
    try {
      const closing = gw.close(5_000);
      await sleep(50);
      expect((await fetch(`${gw.url}/readyz`)).status).toBe(503);
      const refused = await postChat(gw, { model: 'm', messages });
      expect(refused.status).toBe(503);
      expect((await refused.json()).error.code).toBe('shutting_down');
      expect(await body).toContain('data: [DONE]');
      await closing;
      // 1,000 prompt tokens × 1 + 10 completion tokens × 2 per million.
      expect(await after()).toEqual({ granted: before.granted - 1_020, held: 0 });
    } finally {
      await cleanup();
    }
  });

  it('ends a stream still running after the grace period with the error event, unpaid', async () => {
    const { gw, before, body, after, cleanup } = await streamInFlight(1_000, 20);
    try {
      const started = Date.now();
      await gw.close(300);
      expect(Date.now() - started).toBeLessThan(3_000);
      const text = await body;
      expect(text).toContain('"type":"server_error"');
      expect(text).not.toContain('[DONE]');
      expect(await after()).toEqual({ granted: before.granted, held: 0 });
    } finally {
      await cleanup();
    }
  });

  it('a client that leaves while its hold is on the way is not served or charged, and shutdown waits to release that hold', async () => {
    const upstream = await streaming(1, 0);
    const redis = await startTestRedis();
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }, { redis });
    try {
      const before = (await readBalance(redis.client, gw.account))!;
      expect(await (await postChat(gw, { model: 'm', messages, stream: true })).text()).toContain('[DONE]'); // the key is now cached: only the hold waits on Redis
      // Its settlement lands just after the reply.
      await expect.poll(async () => (await readBalance(redis.client, gw.account))!.granted).toBeLessThan(before.granted);
      const charged = (await readBalance(redis.client, gw.account))!;
      // A script keeps Redis busy for 300 ms: the hold below reaches it only after its client has gone.
      const busy = redis.client.eval(BUSY_300_MS, 0);
      await sleep(20);
      const leaving = new AbortController();
      const request = fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${gw.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages, stream: true }),
        signal: leaving.signal,
      }).catch(() => 'left');
      await sleep(100);
      leaving.abort();
      expect(await request).toBe('left');
      await gw.close(5_000);
      await busy;
      expect(await readBalance(redis.client, gw.account)).toMatchObject({ granted: charged.granted, held: 0 });
    } finally {
      await Promise.all([redis.stop(), upstream.close()]);
    }
  });
});
