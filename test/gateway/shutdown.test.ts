// Graceful shutdown: readiness goes false, new requests get a 503, streams in
// flight finish within the grace period and are charged; streams still running
// after it end with the error event and cost nothing.
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { chunk, sleep, startFakeUpstream } from '../support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway } from '../support/gateway.js';
import { startTestRedis } from '../support/redis.js';

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

describe('graceful shutdown', () => {
  it('finishes a stream within the grace period and charges it, while refusing new work', async () => {
    const upstream = await streaming(10, 50);
    const redis = await startTestRedis();
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }, { redis });
    try {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      const res = await postChat(gw, { model: 'm', messages, stream: true });
      const body = res.text();
      await sleep(100);
      const closing = gw.close(5_000);
      await sleep(50);
      expect((await fetch(`${gw.url}/readyz`)).status).toBe(503);
      const refused = await postChat(gw, { model: 'm', messages });
      expect(refused.status).toBe(503);
      expect((await refused.json()).error.code).toBe('shutting_down');
      expect(await body).toContain('data: [DONE]');
      await closing;
      const after = (await gw.redis.client.hgetall(`parley:account:${gw.account}`));
      // 1,000 prompt tokens × 1 + 10 completion tokens × 2 per million.
      expect(Number(after.granted)).toBe(before.granted - 1_020);
      expect(Number(after.held)).toBe(0);
    } finally {
      await redis.stop();
      await upstream.close();
    }
  });

  it('ends a stream still running after the grace period with the error event, unpaid', async () => {
    const upstream = await streaming(1_000, 20);
    const redis = await startTestRedis();
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }, { redis });
    try {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      const res = await postChat(gw, { model: 'm', messages, stream: true });
      const body = res.text();
      await sleep(100);
      const started = Date.now();
      await gw.close(300);
      expect(Date.now() - started).toBeLessThan(3_000);
      const text = await body;
      expect(text).toContain('"type":"server_error"');
      expect(text).not.toContain('[DONE]');
      const after = await gw.redis.client.hgetall(`parley:account:${gw.account}`);
      expect({ granted: Number(after.granted), held: Number(after.held) }).toEqual({ granted: before.granted, held: 0 });
    } finally {
      await redis.stop();
      await upstream.close();
    }
  });
});
