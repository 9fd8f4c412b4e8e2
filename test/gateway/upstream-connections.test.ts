// A finished stream leaves the upstream's connection open for the next
// request: after [DONE] Parley reads the body to its end instead of
// destroying it, and the client gets its [DONE] without waiting for that.
// A client that reads slowly holds the upstream back instead of filling
// Parley's memory. A call its client has left ends as cancelled, whatever
// else went wrong meanwhile. A kept-alive connection the upstream closes as
// it is reused is tried again on a new one (llama.cpp's server does this
// when its HTTP threads are taken), without counting against the endpoint.
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { drainedOrClosed } from '../../src/protocol/http-io.js';
import { Cancellation } from '../../src/upstream/cancellation.js';
import { postUpstream } from '../../src/upstream/client.js';
import { DIALECTS } from '../../src/upstream/dialects/index.js';
import { chunk, completionBody, replyJson, sleep, startFakeUpstream } from '../support/fake-upstream.js';
import { asAdmin, modelEntry, postChat, startTestGateway } from '../support/gateway.js';

describe('upstream connections', () => {
  it('are reused after a stream, and a late end of the upstream body does not hold up the client', async () => {
    // The upstream sends [DONE], then ends its body only when the test lets it: after the client has its reply.
    const ports: number[] = [];
    let endBody = () => {};
    const upstream = await startFakeUpstream(async (_req, res) => {
      ports.push((res.socket?.remotePort) ?? 0);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'hi' }, 'stop'))}\n\n`);
      res.write('data: [DONE]\n\n');
      await new Promise<void>((resolve) => (endBody = resolve));
      res.end();
    });
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    try {
      for (let i = 0; i < 3; i++) {
        const reply = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'x' }], stream: true });
        // A client held up until the upstream's end would never get here: the end waits for this text.
        const text = await Promise.race([reply.text(), sleep(5_000).then(() => 'held up')]);
        expect(text.trim().endsWith('data: [DONE]')).toBe(true);
        endBody();
        await sleep(200);
      }
      expect(new Set(ports).size).toBe(1);
    } finally {
      endBody();
      await gw.close();
      await upstream.close();
    }
  });

  it('hold the upstream back while the client is not reading', async () => {
    const content = 'x'.repeat(1000);
    const event = `data: ${JSON.stringify(chunk({ content }))}\n\n`;
    const ceiling = 256 * 1024 * 1024;
    let written = 0;
    const upstream = await startFakeUpstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      while (written < ceiling && !res.destroyed) {
        written += event.length;
        if (!res.write(event)) await drainedOrClosed(res, 60_000);
      }
      res.end();
    });
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    try {
      const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }], stream: true });
      const client = request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${gw.apiKey}`, 'content-type': 'application/json' } });
      const response = await new Promise<import('node:http').IncomingMessage>((resolve) => client.end(body).once('response', resolve));
      expect(response.statusCode).toBe(200);
      response.pause();
      await sleep(2_000);
      const stalled = written;
      await sleep(500);
      // Only socket buffers' worth went out, and nothing more while the client still does not read.
      expect(stalled).toBeLessThan(64 * 1024 * 1024);
      expect(written).toBe(stalled);
      client.destroy();
    } finally {
      await gw.close();
      await upstream.close();
    }
  });

  it('end as cancelled when the client has left, even if the upstream could not be reached meanwhile', async () => {
    const left = new Cancellation();
    left.cancel();
    // Nothing listens on port 1: the connection is refused while the call is already cancelled.
    const call = postUpstream({ url: 'http://127.0.0.1:1/v1', apiKey: undefined, dialect: DIALECTS.vllm }, '/chat/completions', { model: 'm' }, left, { firstByteMs: 1_000, idleMs: 1_000 });
    await expect(call).rejects.toMatchObject({ name: 'AbortError' });
  });
  it('that the upstream closed as they were reused are tried once more on a new connection, not held against the endpoint', async () => {
    // The second request on every connection finds it closed, before any byte of a reply.
    const served = new WeakMap<Socket, number>();
    let closeFresh = false;
    const upstream = await startFakeUpstream((_req, res) => {
      const socket = res.socket!;
      const count = (served.get(socket) ?? 0) + 1;
      served.set(socket, count);
      if (count === 2 || closeFresh) return void socket.destroy();
      replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }));
    });
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'llamacpp', url: upstream.url }])] });
    try {
      for (let i = 0; i < 3; i++) expect((await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'x' }] })).status).toBe(200);
      // The second and third requests each went out twice: on the closed connection, then on a new one.
      expect(upstream.received.length).toBe(5);
      const endpoints = async () => (await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json()).data[0].endpoints[0];
      expect((await endpoints()).failures).toBe(0);
      // A new connection closed before its reply is a failure as before: sent once, and counted.
      closeFresh = true;
      const sent = upstream.received.length;
      expect((await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'x' }] })).status).toBe(502);
      expect(upstream.received.length - sent).toBeLessThanOrEqual(2);
      expect((await endpoints()).failures).toBe(1);
    } finally {
      await gw.close();
      await upstream.close();
    }
  });
});
