// Failures answered before any upstream call, each in OpenAI's error body.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionBody, replyJson, sleep, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { createApiKey } from '../../src/accounts/api-keys.js';
import { TEST_KEY_SECRET, modelEntry, postChat, startGatewayOn, startTestGateway, type GatewayOnUpstreams, type TestGateway } from '../support/gateway.js';

/** An error in OpenAI's shape: its status, code and param, and a message that says something. */
async function expectError(res: Response, status: number, code: string | null, param: string | null = null) {
  expect(res.status).toBe(status);
  const body = await res.json();
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(body.error.code).toBe(code);
  expect(body.error.param).toBe(param);
  expect(body.error.message.length).toBeGreaterThan(10);
}

describe('errors before the upstream', () => {
  let running: GatewayOnUpstreams;
  let upstream: FakeUpstream;
  let gw: TestGateway;
  beforeAll(async () => {
    running = await startGatewayOn([(_req, res) => replyJson(res, completionBody('ok', { prompt_tokens: 1, completion_tokens: 1 }))], ([url]) => ({
      gateway: { maxBodyBytes: 2048 },
      models: [modelEntry('m', [{ kind: 'vllm', url }])],
    }));
    ({ gw, upstreams: [upstream] } = running);
  });
  afterAll(() => running.close());

  it('invalid JSON is a 400', async () => {
    await expectError(await postChat(gw, '{"model": '), 400, 'invalid_json');
  });

  it('a body that is not JSON by content type is a 400', async () => {
    await expectError(await postChat(gw, 'model=m', { 'content-type': 'application/x-www-form-urlencoded' }), 400, 'invalid_content_type');
  });

  it('an unknown model is a 404 model_not_found', async () => {
    await expectError(await postChat(gw, { model: 'nope', messages: [{ role: 'user', content: 'x' }] }), 404, 'model_not_found', 'model');
  });

  it('an unknown route is a 404', async () => {
    await expectError(await fetch(`${gw.url}/v1/audio/speech`, { method: 'POST' }), 404, 'unknown_url');
  });

  it('a body over the size limit is a 413', async () => {
    await expectError(await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'x'.repeat(5000) }] }), 413, 'request_too_large');
  });

  it('a body over the size limit sent in chunks, with no Content-Length, is a 413 too', async () => {
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(5000) }] });
    const parts = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < body.length; i += 500) controller.enqueue(new TextEncoder().encode(body.slice(i, i + 500)));
        controller.close();
      },
    });
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gw.apiKey}`, 'content-type': 'application/json' },
      body: parts,
      duplex: 'half',
    } as RequestInit);
    await expectError(res, 413, 'request_too_large');
  });

  it('none of these reached the upstream', () => {
    expect(upstream.received).toHaveLength(0);
  });
});

describe('the models endpoints', () => {
  it('list the routing file models with their context windows', async () => {
    const gw = await startTestGateway({ models: [modelEntry('a', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }]), modelEntry('b/c', [{ kind: 'sglang', url: 'http://127.0.0.1:9/v1' }], { contextWindow: 32768 })] });
    try {
      const list = await gw.client.models.list();
      expect(list.data.map((m) => [m.id, (m as unknown as { context_window: number }).context_window])).toEqual([['a', 4096], ['b/c', 32768]]);
      const one = await (await fetch(`${gw.url}/v1/models/b%2Fc`, { headers: { authorization: `Bearer ${gw.apiKey}` } })).json();
      expect(one.context_window).toBe(32768);
      expect((await fetch(`${gw.url}/v1/models/zzz`, { headers: { authorization: `Bearer ${gw.apiKey}` } })).status).toBe(404);
    } finally {
      await gw.close();
    }
  });

  it("answer Codex's catalog request (its version in the query) in Codex's shape, alike on every replica: the models with agent instructions, their windows, those instructions", async () => {
    const instructions = 'You are a careful coding agent.';
    const config = {
      models: [
        modelEntry('coder', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }], { contextWindow: 65536, agentInstructions: instructions, description: 'a coder' }),
        modelEntry('plain', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }]),
      ],
    };
    const gw = await startTestGateway(config);
    // Three replicas on one Redis: the same keys, the same catalog.
    const others = [await startTestGateway(config, { redis: gw.redis }), await startTestGateway(config, { redis: gw.redis })];
    try {
      const { key: limited } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'plain only', { models: ['plain'] });
      const catalog = (url: string, key: string, query = '?client_version=0.171.0') => fetch(`${url}/v1/models${query}`, { headers: { authorization: `Bearer ${key}` } });
      for (const replica of [gw, ...others]) {
        expect(await (await catalog(replica.url, gw.apiKey)).json()).toEqual({
          models: [
            expect.objectContaining({ slug: 'coder', display_name: 'coder', description: 'a coder', base_instructions: instructions, context_window: 65536, max_context_window: 65536, visibility: 'list', supported_in_api: true }),
          ],
        });
        // A key limited to other models learns nothing of this one.
        expect(await (await catalog(replica.url, limited)).json()).toEqual({ models: [] });
      }
      // Without a key, nothing; an odd or huge version changes nothing; without the version, OpenAI's list.
      await expectError(await catalog(gw.url, 'sk-parley-wrong'), 401, 'invalid_api_key');
      expect((await (await catalog(gw.url, gw.apiKey, `?client_version=${'9'.repeat(4000)}&client_version=x`)).json()).models).toHaveLength(1);
      expect((await (await catalog(gw.url, gw.apiKey, '')).json()).object).toBe('list');
    } finally {
      for (const other of others) await other.close();
      await gw.close();
    }
  });
});

describe('an upstream that fails after keep-alives committed the stream', () => {
  it('ends the stream with an error event carrying the failure', async () => {
    const upstream = await startFakeUpstream(async (_req, res) => {
      await sleep(250);
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"overloaded"}}');
    });
    const gw = await startTestGateway({ gateway: { keepAliveMs: 40 }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    try {
      const res = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'x' }], stream: true });
      expect(res.status).toBe(200);
      const events = (await res.text()).split('\n\n').filter(Boolean);
      expect(events[0]).toBe(': keep-alive');
      const last = JSON.parse(events.at(-1)!.slice(6));
      expect(last.error.type).toBe('server_error');
      expect(events).not.toContain('data: [DONE]');
    } finally {
      await gw.close();
      await upstream.close();
    }
  });
});
