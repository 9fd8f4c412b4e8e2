import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../src/config-error.js';
import { parseRoutingFile } from '../src/config.js';
import { completionBody, replyJson, sleep, startFakeUpstream, type FakeUpstream } from './support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway, type TestGateway } from './support/gateway.js';

const parse = (text: string) => parseRoutingFile(text, 'routing.yaml', '/etc/parley');

describe('the routing file', () => {
  it('reads YAML and fills defaults', () => {
    const c = parse(`
models:
  - id: llama-70b
    contextWindow: 8192
    pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }
    tokenizer: { gguf: tok/llama.gguf }
    endpoints:
      - { kind: vllm, url: "http://vllm-0:8000/v1", apiKeyEnv: VLLM_KEY }
`);
    expect(c.gateway.keepAliveMs).toBe(15000);
    expect(c.models[0].supports).toEqual({ tools: false, jsonOutput: false });
    expect(c.models[0].tokenizer!.gguf).toBe('/etc/parley/tok/llama.gguf');
  });

  it('reads JSON too', () => {
    const c = parse(JSON.stringify({ models: [modelEntry('m', [{ kind: 'openai', url: 'https://api.example/v1' }])] }));
    expect(c.models[0].id).toBe('m');
  });

  it('names the line and field of a wrong value', () => {
    const text = `models:
  - id: m
    contextWindow: 4096
    pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }
    endpoints:
      - kind: tgi
        url: http://x/v1
`;
    expect(() => parse(text)).toThrow(ConfigError);
    expect(() => parse(text)).toThrow(/^routing.yaml:6: models\[0\]\.endpoints\[0\]\.kind: /);
  });

  it('names a missing field', () => {
    expect(() => parse('models:\n  - id: m\n    endpoints: []\n')).toThrow(/routing.yaml:2: models\[0\]\.contextWindow/);
  });

  it('names the line of a YAML syntax error', () => {
    expect(() => parse('models:\n  - id: [m\n')).toThrow(/^routing.yaml:\d+:\d+: /);
  });

  it('takes a local engine\'s threads as a whole number of at least one', () => {
    const local = (threads: unknown) => parse(JSON.stringify({ models: [modelEntry('m', [{ kind: 'parley-engine', local: { threads } }])] }));
    expect(local(2).models[0].endpoints[0].local!.threads).toBe(2);
    expect(() => local(0)).toThrow(/models\[0\]\.endpoints\[0\]\.local\.threads/);
    expect(() => local(1.5)).toThrow(/local\.threads/);
  });

  it('refuses an endpoint with both url and local, and a repeated model id', () => {
    expect(() => parse(JSON.stringify({ models: [modelEntry('m', [{ kind: 'parley-engine', url: 'http://x/v1', local: {} }])] }))).toThrow(/url: give exactly one/);
    const twice = modelEntry('m', [{ kind: 'openai', url: 'http://x/v1' }]);
    expect(() => parse(JSON.stringify({ models: [twice, twice] }))).toThrow(/appears twice/);
  });
});

describe('reloading the routing file', () => {
  let gw: TestGateway | undefined;
  const upstreams: FakeUpstream[] = [];
  afterEach(async () => {
    await gw?.close();
    await Promise.all(upstreams.splice(0).map((u) => u.close()));
  });

  const answering = async (content: string, delayMs = 0) => {
    const u = await startFakeUpstream(async (_req, res) => {
      await sleep(delayMs);
      replyJson(res, completionBody(content, { prompt_tokens: 1, completion_tokens: 1 }));
    });
    upstreams.push(u);
    return u;
  };

  it('takes a new version without a restart and without dropping requests in flight', async () => {
    const a = await answering('from-a', 400);
    const b = await answering('from-b');
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: a.url }])] });
    const body = { model: 'm', messages: [{ role: 'user', content: 'x' }] };
    const inFlight = postChat(gw, body);
    await sleep(50);
    gw.writeConfig({ models: [modelEntry('m', [{ kind: 'vllm', url: b.url }]), modelEntry('new-model', [{ kind: 'vllm', url: b.url }])] });
    let after;
    for (let i = 0; i < 50; i++) {
      await sleep(50);
      after = await (await postChat(gw, { ...body, model: 'new-model' })).json();
      if (after.choices) break;
    }
    expect(after.choices[0].message.content).toBe('from-b');
    const old = await inFlight;
    expect(old.status).toBe(200);
    expect((await old.json()).choices[0].message.content).toBe('from-a');
  });

  it('keeps serving the last good version when the new one is invalid', async () => {
    const a = await answering('still-a');
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: a.url }])] });
    gw.writeConfig({ models: [{ id: 'm' }] });
    await sleep(300);
    const r = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'x' }] });
    expect((await r.json()).choices[0].message.content).toBe('still-a');
  });
});

describe('the shipped routing files', () => {
  it.each(['quickstart.yaml', 'multi-cluster.example.yaml'])('%s is valid', async (name) => {
    const { loadRoutingFile } = await import('../src/config.js');
    expect(loadRoutingFile(new URL(`../config/${name}`, import.meta.url).pathname).models.length).toBeGreaterThan(0);
  });
});
