// Real engines reporting their load: two of them behind Parley, one kept
// busy by requests sent to it directly (another team's job that bypasses the
// gateway). Parley's counts say both are idle; the engines' own metrics say
// otherwise, and new requests go to the idle one. Parley's own engine
// always; llama.cpp's llama-server as well where one is built (its path in
// PARLEY_LLAMA_SERVER, or where bench/real-upstream-ttft.mjs builds it).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureDefaultModel } from '../../src/engine/model-maker.js';
import { freePort } from '../support/redis.js';
import { asAdmin, modelEntry, postChat, startTestGateway, type TestGateway } from '../support/gateway.js';
import { sleep } from '../support/fake-upstream.js';

const LLAMA_SERVER = process.env.PARLEY_LLAMA_SERVER ?? '/tmp/llama.cpp/build/bin/llama-server';
const DIRECT = 10;
const THROUGH_PARLEY = 12;
const ENGINE_LOAD = { intervalMs: 200, timeoutMs: 1000 };

interface EndpointView {
  url: string;
  requests: number;
  engine: { source: string; load?: { running: number; waiting: number }; external: number };
}
const endpoints = async (gw: TestGateway) =>
  ((await (await fetch(`${gw.url}/admin/v1/endpoints`, { headers: asAdmin })).json()) as { data: { endpoints: EndpointView[] }[] }).data[0].endpoints;

/** Keeps `count` long streamed requests running on the engine at `baseUrl`, straight to it, until stopped. */
function loadDirectly(baseUrl: string, count: number): () => void {
  const abort = new AbortController();
  const one = async (): Promise<void> => {
    while (!abort.signal.aborted) {
      try {
        const res = await fetch(`${baseUrl}/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Write at length.' }], max_tokens: 3000, stream: true }),
          signal: abort.signal,
        });
        const reader = res.body!.getReader();
        while (!(await reader.read()).done);
      } catch {
        // Aborted at the end.
      }
    }
  };
  for (let i = 0; i < count; i++) void one();
  return () => abort.abort();
}

/** Sends requests through Parley one after another; returns how many each endpoint served, by URL. */
async function throughParley(gw: TestGateway): Promise<Map<string, number>> {
  const before = new Map((await endpoints(gw)).map((e) => [e.url, e.requests]));
  for (let i = 0; i < THROUGH_PARLEY; i++) {
    const res = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: `A short question, number ${i}, from team ${i % 5}.` }], max_tokens: 2 });
    expect(res.status).toBe(200);
  }
  return new Map((await endpoints(gw)).map((e) => [e.url, e.requests - (before.get(e.url) ?? 0)]));
}

/** Waits until the gateway's view of the endpoint at `url` reports what `until` asks. */
async function engineReports(gw: TestGateway, url: string, until: (e: EndpointView) => boolean): Promise<EndpointView> {
  for (let i = 0; i < 100; i++) {
    const e = (await endpoints(gw)).find((x) => x.url === url)!;
    if (until(e)) return e;
    await sleep(100);
  }
  throw new Error(`the engine at ${url} never reported as asked: ${JSON.stringify((await endpoints(gw)).find((x) => x.url === url))}`);
}

async function expectMostToTheIdleEngine(gw: TestGateway): Promise<void> {
  const [busy, idle] = (await endpoints(gw)).map((e) => e.url);
  const stop = loadDirectly(busy, DIRECT);
  try {
    // Work from elsewhere counts once two readings in a row have found it (routing/engine-reports.ts).
    const seen = await engineReports(gw, busy, (e) => e.engine.source === 'engine' && e.engine.external >= DIRECT - 2);
    expect(seen.engine.load!.running + seen.engine.load!.waiting).toBeGreaterThanOrEqual(DIRECT - 2);
    const served = await throughParley(gw);
    expect(served.get(busy)! + served.get(idle)!).toBe(THROUGH_PARLEY);
    expect(served.get(idle)!).toBeGreaterThanOrEqual(THROUGH_PARLEY - 2);
  } finally {
    stop();
  }
}

describe("two of Parley's own engines, one loaded directly", () => {
  let gw: TestGateway;
  beforeAll(async () => {
    // Two engines: local engines of the same settings are one process, so their contexts differ.
    const engines = [4096, 4608].map((contextSize) => ({ kind: 'parley-engine', local: { contextSize, parallel: 2, threads: 1 } }));
    gw = await startTestGateway({ gateway: { engineLoad: ENGINE_LOAD }, models: [modelEntry('m', engines)] });
  });
  afterAll(() => gw?.close());

  it('reports its requests processing and deferred at /metrics in llama-server’s names', async () => {
    const [busy] = (await endpoints(gw)).map((e) => e.url);
    const stop = loadDirectly(busy, 3);
    try {
      const e = await engineReports(gw, busy, (x) => x.engine.load?.running === 2 && x.engine.load.waiting === 1);
      expect(e.engine.source).toBe('engine');
      const text = await (await fetch(busy.replace(/\/v1$/, '/metrics'))).text();
      expect(text).toContain('# TYPE llamacpp:requests_processing gauge');
      expect(text).toMatch(/^llamacpp:requests_deferred \d+$/m);
    } finally {
      stop();
    }
    await engineReports(gw, busy, (x) => x.engine.load?.running === 0 && x.engine.load.waiting === 0);
  });

  it('sends most new requests to the other engine', () => expectMostToTheIdleEngine(gw));
});

describe.skipIf(!existsSync(LLAMA_SERVER))("two of llama.cpp's llama-servers, one loaded directly", () => {
  let gw: TestGateway;
  const servers: ChildProcess[] = [];

  beforeAll(async () => {
    const model = ensureDefaultModel(join(process.cwd(), '.parley-test', 'llama-server-model.gguf'));
    const urls: string[] = [];
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      servers.push(spawn(LLAMA_SERVER, ['-m', model, '--port', String(port), '-np', '2', '-c', '8192', '--metrics', '-t', '1'], { stdio: 'ignore' }));
      urls.push(`http://127.0.0.1:${port}/v1`);
    }
    for (const url of urls) {
      for (let i = 0; ; i++) {
        const ok = await fetch(url.replace(/\/v1$/, '/health')).then((r) => r.ok, () => false);
        if (ok) break;
        if (i > 300) throw new Error(`llama-server at ${url} did not start`);
        await sleep(100);
      }
    }
    gw = await startTestGateway({ gateway: { engineLoad: ENGINE_LOAD }, models: [modelEntry('m', urls.map((url) => ({ kind: 'llamacpp', url })))] });
  });
  afterAll(async () => {
    await gw?.close();
    for (const s of servers) s.kill('SIGKILL');
  });

  it('sends most new requests to the other server', () => expectMostToTheIdleEngine(gw));
});
