// Metrics as Prometheus text at /metrics, and traces exported over OTLP to a
// collector, with no API key or prompt text in either.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chunk, completionBody, replyJson, sleep, startFakeUpstream, writeEvents, type FakeUpstream } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, startTestGateway, type TestGateway } from '../support/gateway.js';
import { flushRequestLog } from '../../src/telemetry/request-log.js';
import { Router } from '../../src/routing/router.js';
import { Telemetry } from '../../src/telemetry/telemetry.js';

const SECRET_PROMPT = 'the launch code is tangerine-4417';
const messages = [{ role: 'user' as const, content: SECRET_PROMPT }];

let upstream: FakeUpstream;
/** Streams one piece and then waits for `finishSlow`. */
let slow: FakeUpstream;
let finishSlow = () => {};
beforeAll(async () => {
  slow = await startFakeUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'hi' }))}\n\n`);
    finishSlow = () => res.end(`data: ${JSON.stringify(chunk({}, 'stop'))}\n\ndata: [DONE]\n\n`);
  });
  upstream = await startFakeUpstream((req, res) => {
    const usage = { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 } };
    if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content: 'hi' }), { ...chunk({}, 'stop'), usage }]);
    replyJson(res, completionBody('hi', usage));
  });
});
afterAll(async () => {
  await upstream.close();
  await slow.close();
});

describe('metrics', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }]), modelEntry('slow', [{ kind: 'vllm', url: slow.url }])] });
  });
  afterAll(() => gw.close());

  it("are scrapeable as Prometheus text, generations in OpenTelemetry's GenAI conventions: requests by code, latency, first token, tokens, upstream calls, health, holds", async () => {
    await gw.client.chat.completions.create({ model: 'm', messages });
    await (await postChat(gw, { model: 'm', messages, stream: true })).text();
    await postChat(gw, { model: 'nope', messages });
    const res = await fetch(`${gw.url}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    // The value of the series whose line holds every one of `parts`.
    const value = (...parts: string[]) => Number(text.split('\n').find((l) => !l.startsWith('#') && parts.every((p) => l.includes(p)))?.split(' ').at(-1));
    expect(value('parley_requests_total{', 'route="POST /v1/chat/completions"', 'status="200"')).toBe(2);
    expect(value('parley_requests_total{', 'status="404"', 'code="model_not_found"')).toBe(1);
    expect(value('parley_request_duration_seconds_count{', 'status="200"')).toBe(2);
    expect(value('gen_ai_server_request_duration_count{', 'gen_ai_operation_name="chat"', 'gen_ai_request_model="m"', 'gen_ai_provider_name="vllm"')).toBe(2);
    expect(value('gen_ai_server_request_duration_count{', 'gen_ai_request_model="(unknown)"', 'error_type="model_not_found"')).toBe(1);
    expect(value('gen_ai_server_time_to_first_token_count{', 'gen_ai_request_model="m"')).toBe(1);
    expect(value('gen_ai_server_time_per_output_token_count{', 'gen_ai_request_model="m"')).toBe(1);
    expect(value('gen_ai_client_token_usage_sum{', 'gen_ai_token_type="cached_input"')).toBe(128);
    expect(value('gen_ai_client_token_usage_sum{', 'gen_ai_token_type="output"')).toBe(10);
    expect(value('gen_ai_client_operation_duration_count{', `server_address="${upstream.url}"`)).toBe(2);
    expect(value('parley_upstream_healthy{', 'model="m"')).toBe(1);
    expect(value('parley_upstream_in_flight{', 'model="m"')).toBe(0);
    expect(['priority', 'default', 'flex'].map((tier) => value('parley_upstream_queued{', 'model="m"', `tier="${tier}"`))).toEqual([0, 0, 0]);
    expect(value('parley_holds_open')).toBe(0);
    expect(text).not.toContain(gw.apiKey);
    expect(text).not.toContain('tangerine');
  });

  it("show the API-key caches' entries, so that a tenant presenting made-up keys is seen", async () => {
    const entries = async () => {
      const text = await (await fetch(`${gw.url}/metrics`)).text();
      const of = (cache: string) => Number(new RegExp(`^parley_key_cache_entries\\{cache="${cache}"[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1]);
      return { keys: of('keys'), keyHmacs: of('key_hmacs'), keyIdHashes: of('key_id_hashes') };
    };
    await gw.client.chat.completions.create({ model: 'm', messages });
    const before = await entries();
    expect(before.keys).toBeGreaterThanOrEqual(1);
    expect(before.keyHmacs).toBeGreaterThanOrEqual(1);
    for (let i = 0; i < 3; i++) {
      const res = await postChat({ url: gw.url, apiKey: `sk-parley-${String(i).padStart(43, 'z')}` }, { model: 'm', messages });
      expect(res.status).toBe(401);
    }
    expect(await entries()).toEqual({ keys: before.keys + 3, keyHmacs: before.keyHmacs + 3, keyIdHashes: before.keyIdHashes });
  });

  it('give every URL Parley does not serve one shared route label, so a scan of random paths adds no series', async () => {
    const series = async () => (await (await fetch(`${gw.url}/metrics`)).text()).split('\n').filter((l) => l.startsWith('parley_')).length;
    for (let i = 1; i <= 20; i++) await fetch(`${gw.url}/x${i}${'/y'.repeat(i % 3)}?q=${i}`, { method: i % 2 ? 'GET' : 'POST' });
    await fetch(`${gw.url}/v1/models/some-model-${Math.random()}`);
    const text = await (await fetch(`${gw.url}/metrics`)).text();
    expect(text).toContain('route="GET unmatched"');
    expect(text).toContain('route="POST unmatched"');
    expect(text).not.toMatch(/route="[A-Z]+ \/x/);
    expect(text).not.toContain('some-model-');
    const again = await series();
    for (let i = 21; i <= 40; i++) await fetch(`${gw.url}/x${i}`, { method: i % 2 ? 'GET' : 'POST' });
    expect(await series()).toBe(again);
  });

  it('counts a hold while its reply streams, and not once the reply is done', async () => {
    const holdsOpen = async () => Number(/^parley_holds_open(?:\{[^}]*\})? (\S+)$/m.exec(await (await fetch(`${gw.url}/metrics`)).text())?.[1]);
    const res = await postChat(gw, { model: 'slow', messages, stream: true });
    const reader = res.body!.getReader();
    await reader.read();
    expect(await holdsOpen()).toBe(1);
    finishSlow();
    while (!(await reader.read()).done);
    expect(await holdsOpen()).toBe(0);
  });
});

interface Span {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: { key: string; value: Record<string, unknown> }[];
}

describe('tokens by account', () => {
  it('are on /metrics only where an operator asks, for the top N accounts and the rest as other, on the metrics port alone', async () => {
    const quiet = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const gw = await startTestGateway({ gateway: { metricsTopAccounts: 2 }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }, { metricsPort: 0 });
    try {
      await quiet.client.chat.completions.create({ model: 'm', messages });
      expect(await (await fetch(`${quiet.url}/metrics`)).text()).not.toContain('parley_account_tokens{');
      const teams = await Promise.all([0, 1, 2, 3].map(() => makeAccount(gw.redis, 1)));
      // Team i sends i + 1 requests of 105 tokens: teams 3 and 2 used the most.
      for (const [i, team] of teams.entries()) for (let n = 0; n <= i; n++) await postChat({ url: gw.url, apiKey: team.key }, { model: 'm', messages });
      expect(gw.metricsUrl).not.toContain(gw.url);
      const text = await (await fetch(gw.metricsUrl)).text();
      const series = text.split('\n').filter((l) => l.startsWith('parley_account_tokens{'));
      expect(series).toHaveLength(3);
      expect(series.find((l) => l.includes(teams[3].account))).toMatch(/ 420$/);
      expect(series.find((l) => l.includes(teams[2].account))).toMatch(/ 315$/);
      expect(series.find((l) => l.includes('account="other"'))).toMatch(/ 315$/);
      // A tenant calling the API's port reads no other account's name: there it is a route like any unknown one.
      const onApiPort = await fetch(`${gw.url}/metrics`);
      expect(onApiPort.status).toBe(404);
      expect(await onApiPort.text()).not.toContain(teams[3].account);
      expect((await fetch(gw.metricsUrl.replace('/metrics', '/v1/models'))).status).toBe(404);
    } finally {
      await quiet.close();
      await gw.close();
    }
  });
});

/**
 * Runs `use` with stdout's writes captured, each as written; the gateway
 * closes before stdout is restored, so that the lines it writes last are
 * among them.
 */
async function stdoutWrites(gw: TestGateway, use: (writes: string[]) => Promise<unknown>): Promise<string[]> {
  const writes: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((text: string) => (writes.push(String(text)), true)) as typeof process.stdout.write;
  try {
    await use(writes);
  } finally {
    await gw.close();
    process.stdout.write = write;
  }
  return writes;
}

/** The request log lines among stdout's writes, read as JSON. */
const loggedRequests = (writes: string[]) => writes.flatMap((w) => w.trimEnd().split('\n')).filter((l) => l.includes('"msg":"request"')).map((l) => JSON.parse(l));

describe('a log line per request', () => {
  it('is JSON on stdout with the ids, model, endpoint, status, tokens, cost, latency and attempts, never the key or the prompt', async () => {
    const gw = await startTestGateway({ gateway: { requestLog: true }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const lines = await stdoutWrites(gw, async () => {
      await (await postChat(gw, { model: 'm', messages }, { 'x-request-id': 'log-me-1' })).text();
      await postChat(gw, { model: 'nope', messages }, { 'x-request-id': 'log-me-2' });
    });
    const logged = loggedRequests(lines);
    // 36 uncached × 1 + 64 cached × 0.1 + 5 out × 2 = 52.4 micro-units, rounded up.
    expect(logged[0]).toMatchObject({
      level: 'info', request_id: 'log-me-1', account: gw.account, key_id: expect.stringMatching(/^key_/), api: 'chat', model: 'm', service_tier: 'default',
      endpoint: upstream.url, status: 200, prompt_tokens: 100, cached_tokens: 64, completion_tokens: 5, cost_micros: 53, attempts: 1,
    });
    expect(logged[0].total_ms).toBeGreaterThanOrEqual(logged[0].first_byte_ms);
    expect(logged[1]).toMatchObject({ request_id: 'log-me-2', model: 'nope', status: 404, error: 'model_not_found', attempts: 0 });
    expect(lines.join('')).not.toContain(gw.apiKey);
    expect(lines.join('')).not.toContain('tangerine');
  });
});

describe("a log line's phases", () => {
  it('say when the hold stood, when the upstream was sent the request and when it answered, in order, with the upstream\'s own wait between the last two', async () => {
    const UPSTREAM_MS = 80;
    const usage = { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11 };
    const delayed = await startFakeUpstream((req, res) => {
      setTimeout(() => (req.body.stream ? writeEvents(res, [chunk({ role: 'assistant', content: 'hi' }), { ...chunk({}, 'stop'), usage }]) : replyJson(res, completionBody('hi', usage))), UPSTREAM_MS);
    });
    const gw = await startTestGateway({ gateway: { requestLog: true }, models: [modelEntry('m', [{ kind: 'vllm', url: delayed.url }])] });
    try {
      const lines = await stdoutWrites(gw, async () => {
        await (await postChat(gw, { model: 'm', messages }, { 'x-request-id': 'phases-1' })).text();
        await (await postChat(gw, { model: 'm', messages, stream: true }, { 'x-request-id': 'phases-2' })).text();
      });
      for (const line of loggedRequests(lines)) {
        const { admitted_ms: admitted, upstream_sent_ms: sent, upstream_answered_ms: answered, first_byte_ms: firstByte, total_ms: total } = line;
        expect(admitted).toBeGreaterThan(0);
        expect(sent).toBeGreaterThanOrEqual(admitted);
        expect(answered - sent).toBeGreaterThanOrEqual(UPSTREAM_MS - 5);
        expect(firstByte).toBeGreaterThanOrEqual(Math.floor(answered));
        expect(total).toBeGreaterThanOrEqual(firstByte);
      }
      expect(loggedRequests(lines)).toHaveLength(2);
    } finally {
      await delayed.close();
    }
  });
});

describe('log lines, written together', () => {
  it('go to stdout in fewer writes than lines, and all of them by the time the gateway has closed', async () => {
    const gw = await startTestGateway({ gateway: { requestLog: true }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const writes = await stdoutWrites(gw, () =>
      Promise.all(Array.from({ length: 8 }, (_, i) => postChat(gw, { model: 'm', messages }, { 'x-request-id': `together-${i}` }).then((r) => r.text()))),
    );
    const logging = writes.filter((w) => w.includes('"msg":"request"'));
    const ids = loggedRequests(logging).map((l) => l.request_id);
    expect(ids.sort()).toEqual(Array.from({ length: 8 }, (_, i) => `together-${i}`).sort());
    expect(logging.length).toBeLessThan(8);
  });
});

describe('a log line per request, across a reload', () => {
  it('follows the routing table the request started on: a reload that turns the log off mid-reply leaves that reply its line', async () => {
    const config = (requestLog: boolean) => ({ gateway: { requestLog }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }]), modelEntry('s', [{ kind: 'vllm', url: slow.url }])] });
    const gw = await startTestGateway(config(true));
    const lines = await stdoutWrites(gw, async (written) => {
      const reply = await postChat(gw, { model: 's', messages, stream: true }, { 'x-request-id': 'started-logged' });
      const reader = reply.body!.getReader();
      await reader.read();
      gw.writeConfig(config(false));
      // The reload has landed once a whole request logs nothing.
      for (let i = 0; i < 50; i++) {
        const before = written.length;
        await (await postChat(gw, { model: 'm', messages }, { 'x-request-id': `probe-${i}` })).text();
        flushRequestLog();
        if (written.length === before) break;
        await sleep(50);
      }
      finishSlow();
      while (!(await reader.read()).done);
      await sleep(50);
    });
    const logged = loggedRequests(lines).map((l) => l.request_id);
    expect(logged).toContain('started-logged');
  });
});

describe('GenAI series', () => {
  // The series are keyed by text made beside their attributes, not from them: two requests with one set of
  // attributes must land in one series, and two with different ones in two.
  it('are one per set of attributes: Messages and chat are one chat series, a model named "undefined" is not an unknown one', async () => {
    const telemetry = new Telemetry(new Router());
    try {
      const served = { attempts: 1, servedModel: 'm', endpoint: 'http://e/v1', provider: 'vllm', promptTokens: 3, completionTokens: 2, cachedTokens: 0 };
      telemetry.recordGeneration({ id: 'a', api: 'chat', modelLabel: 'm', ...served }, 0.5, undefined, 0);
      telemetry.recordGeneration({ id: 'b', api: 'messages', modelLabel: 'm', ...served }, 0.5, undefined, 0);
      telemetry.recordGeneration({ id: 'c', api: 'chat', modelLabel: 'undefined', attempts: 1 }, 0.5, 'model_not_found', 0);
      telemetry.recordGeneration({ id: 'd', api: 'chat', attempts: 1 }, 0.5, 'model_not_found', 0);
      const lines = (await scrape(telemetry)).split('\n');
      const counts = (metric: string) => lines.filter((l) => l.startsWith(`${metric}_count{`));
      expect(counts('gen_ai_server_request_duration').length).toBe(3);
      const chat = counts('gen_ai_server_request_duration').find((l) => l.includes('gen_ai_request_model="m"'));
      expect(chat).toContain('gen_ai_operation_name="chat"');
      expect(chat?.split(' ').at(-1)).toBe('2');
      expect(counts('gen_ai_client_token_usage').map((l) => l.split(' ').at(-1))).toEqual(['2', '2', '2']);
      expect(lines.filter((l) => /^gen_ai_server_request_duration_count\{.*gen_ai_request_model="(undefined|\(unknown\))"/.test(l)).length).toBe(2);
    } finally {
      await telemetry.shutdown();
    }
  });
});

/** The Prometheus text of `telemetry`'s metrics. */
async function scrape(telemetry: Telemetry): Promise<string> {
  const server = createServer((req, res) => telemetry.serveMetrics(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    return await (await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`)).text();
  } finally {
    server.close();
  }
}

describe("the endpoints' gauges", () => {
  it('are read from one snapshot of the router per scrape, not one per gauge', async () => {
    const router = new Router();
    let snapshots = 0;
    const snapshot = router.snapshot.bind(router);
    router.snapshot = () => (snapshots++, snapshot());
    const telemetry = new Telemetry(router);
    try {
      await scrape(telemetry);
      expect(snapshots).toBe(1);
    } finally {
      await telemetry.shutdown();
    }
  });
});

describe('traces over OTLP', () => {
  let collector: Server;
  const received: string[] = [];
  let gw: TestGateway;
  beforeAll(async () => {
    collector = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        received.push(`${req.url} ${body}`);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
    });
    await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
    try {
      gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    } finally {
      delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    }
  });
  afterAll(async () => {
    await gw.close();
    collector.close();
  });

  it('export a trace per request with its upstream attempt and settlement, and no key or prompt text', async () => {
    await gw.client.chat.completions.create({ model: 'm', messages });
    let traces = '';
    for (let i = 0; i < 50 && !traces.includes('settle'); i++) {
      await sleep(100);
      traces = received.filter((r) => r.startsWith('/v1/traces')).join('\n');
    }
    for (const name of ['POST /v1/chat/completions', 'credit hold', 'upstream attempt', 'settle']) expect(traces).toContain(name);
    const spans = traces.split('\n').flatMap((t) => JSON.parse(t.slice(t.indexOf(' ') + 1)).resourceSpans.flatMap((r: { scopeSpans: { spans: Span[] }[] }) => r.scopeSpans.flatMap((s) => s.spans)));
    const request = spans.find((s) => s.name === 'POST /v1/chat/completions')!;
    const attempt = spans.find((s) => s.name === 'upstream attempt')!;
    const settle = spans.find((s) => s.name === 'settle')!;
    expect(attempt.traceId).toBe(request.traceId);
    expect(attempt.parentSpanId).toBe(request.spanId);
    expect(settle.parentSpanId).toBe(request.spanId);
    expect(spans.find((s) => s.name === 'credit hold')!.parentSpanId).toBe(request.spanId);
    const attributes = Object.fromEntries(request.attributes.map((a: Span['attributes'][number]) => [a.key, Object.values(a.value)[0]]));
    expect(attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'm', 'gen_ai.response.model': 'm', 'gen_ai.usage.input_tokens': 100, 'gen_ai.usage.output_tokens': 5 });
    expect(attributes['gen_ai.response.id']).toMatch(/^chatcmpl-/);
    expect(attributes['gen_ai.response.finish_reasons']).toEqual({ values: [{ stringValue: 'stop' }] });
    // The upstream was called with the attempt's W3C trace context, so an engine that traces joins this trace.
    expect(upstream.received.at(-1)!.headers.traceparent).toBe(`00-${request.traceId}-${attempt.spanId}-01`);
    expect(traces).not.toContain(gw.apiKey);
    expect(traces).not.toContain('tangerine');
  });
});
