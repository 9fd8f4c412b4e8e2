// A finished stream leaves the upstream's connection open for the next
// request: after [DONE] Parley reads the body to its end instead of
// destroying it, and the client gets its [DONE] without waiting for that.
import { describe, expect, it } from 'vitest';
import { chunk, sleep, startFakeUpstream } from '../support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway } from '../support/gateway.js';

describe('upstream connections', () => {
  it('are reused after a stream, and a late end of the upstream body does not hold up the client', async () => {
    const ports: number[] = [];
    const upstream = await startFakeUpstream(async (_req, res) => {
      ports.push((res.socket?.remotePort) ?? 0);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'hi' }, 'stop'))}\n\n`);
      res.write('data: [DONE]\n\n');
      await sleep(300);
      res.end();
    });
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    try {
      for (let i = 0; i < 3; i++) {
        const started = Date.now();
        const text = await (await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'x' }], stream: true })).text();
        expect(text.trim().endsWith('data: [DONE]')).toBe(true);
        expect(Date.now() - started).toBeLessThan(250);
        await sleep(400);
      }
      expect(new Set(ports).size).toBe(1);
    } finally {
      await gw.close();
      await upstream.close();
    }
  });
});
