// Scripted upstreams for each dialect and for the failures a real engine
// cannot be made to produce on cue: a death mid-stream, a stall, malformed
// events, an upstream's own context error.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureDefaultModel } from '../../src/engine/model-maker.js';
import { readUsageEvents, usageCsv } from '../../src/billing/usage-events.js';
import { chunk, completionBody, replyJson, sleep, startFakeUpstream, until, writeEvents, type FakeUpstream, type Script } from '../support/fake-upstream.js';
import { modelEntry, postChat, startGatewayOn, startTestGateway, type TestGateway } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';

const messages = [{ role: 'developer' as const, content: 'be brief' }, { role: 'user' as const, content: 'hi' }];

async function withUpstream(kind: string, script: Script, extra: Record<string, unknown> = {}, gateway: Record<string, unknown> = {}) {
  const { gw, upstreams, close } = await startGatewayOn([script], ([url]) => ({ gateway, models: [modelEntry('m', [{ kind, url, upstreamModel: 'served-name' }], extra)] }));
  return { upstream: upstreams[0], gw, close };
}

function parseSse(text: string) {
  return text.split('\n\n').filter(Boolean).map((block) => block.trim());
}

describe('usage fields of each dialect become prompt_tokens_details.cached_tokens', () => {
  const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
    ['openai', { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 } }, {}],
    ['vllm', { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 } }, {}],
    ['sglang', { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 } }, {}],
    ['deepseek', { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_cache_hit_tokens: 64, prompt_cache_miss_tokens: 36 }, {}],
    ['llamacpp', { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105 }, { timings: { cache_n: 64, prompt_n: 36 } }],
  ];
  it.each(cases)('%s, whole and streamed', async (kind, usage, extra) => {
    const t = await withUpstream(kind, (req, res) => {
      if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content: 'hey' }), chunk({}, 'stop'), { ...chunk({}), choices: [], usage, ...extra }]);
      replyJson(res, completionBody('hey', usage, extra));
    });
    try {
      const whole = await t.gw.client.chat.completions.create({ model: 'm', messages });
      expect(whole.usage).toEqual({ prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 } });
      expect(whole.model).toBe('m');
      const stream = await t.gw.client.chat.completions.create({ model: 'm', messages, stream: true, stream_options: { include_usage: true } });
      let last;
      for await (const c of stream) last = c;
      expect(last!.usage).toEqual({ prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 } });
      expect(t.upstream.received[0].body.model).toBe('served-name');
      expect(t.upstream.received[1].body.stream_options.include_usage).toBe(true);
    } finally {
      await t.close();
    }
  });
});

describe('reply ids', () => {
  it("name the reply after its x-request-id: a short random one, or the client's own", async () => {
    const t = await withUpstream('vllm', (req, res) => {
      if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content: 'hey' }), chunk({}, 'stop')]);
      replyJson(res, completionBody('hey', { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }));
    });
    try {
      const whole = await postChat(t.gw, { model: 'm', messages });
      const generated = whole.headers.get('x-request-id')!;
      expect(generated).toMatch(/^[\w-]{22}$/);
      expect((await whole.json()).id).toBe(`chatcmpl-${generated}`);
      const streamed = await postChat(t.gw, { model: 'm', messages, stream: true });
      const other = streamed.headers.get('x-request-id')!;
      expect(other).not.toBe(generated);
      const ids = parseSse(await streamed.text()).slice(0, -1).map((e) => JSON.parse(e.slice(6)).id);
      expect(new Set(ids)).toEqual(new Set([`chatcmpl-${other}`]));
      const given = await postChat(t.gw, { model: 'm', messages }, { 'x-request-id': 'trace-42.a:b' });
      expect(given.headers.get('x-request-id')).toBe('trace-42.a:b');
      expect((await given.json()).id).toBe('chatcmpl-trace-42.a:b');
    } finally {
      await t.close();
    }
  });

  it("are on every reply, errors included, taken from x-client-request-id too, and in the usage event and its CSV row", async () => {
    const t = await withUpstream('vllm', (_req, res) => replyJson(res, completionBody('hey', { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 })));
    try {
      const refused = await postChat(t.gw, { model: 'no-such-model', messages }, { 'x-client-request-id': 'codex-turn-7' });
      expect(refused.status).toBe(404);
      expect(refused.headers.get('x-request-id')).toBe('codex-turn-7');
      const badKey = await postChat({ url: t.gw.url, apiKey: 'sk-wrong' }, { model: 'm', messages });
      expect(badKey.status).toBe(401);
      expect(badKey.headers.get('x-request-id')).toMatch(/^[\w-]{22}$/);
      // A reply whose head Node writes itself (the metrics page: setHeader, then end).
      const metrics = await fetch(`${t.gw.url}/metrics`, { headers: { 'x-request-id': 'scrape-1' } });
      expect(metrics.status).toBe(200);
      expect(metrics.headers.get('x-request-id')).toBe('scrape-1');
      expect(metrics.headers.get('content-type')).toBe('text/plain');
      const served = await postChat(t.gw, { model: 'm', messages }, { 'x-client-request-id': 'codex-turn-8' });
      expect((await served.json()).id).toBe('chatcmpl-codex-turn-8');
      await until(async () => (await usageEventsOf(t.gw.redis.client, t.gw.account)).length === 1);
      expect((await usageEventsOf(t.gw.redis.client, t.gw.account))[0]).toMatchObject({ requestId: 'codex-turn-8', replyId: 'chatcmpl-codex-turn-8', outcome: 'complete' });
      const csv: string[] = [];
      for await (const line of usageCsv(readUsageEvents(t.gw.redis.client, t.gw.account))) csv.push(line);
      expect(csv[1]).toMatch(/^[^,]+,codex-turn-8,.*,chatcmpl-codex-turn-8,default\n$/);
    } finally {
      await t.close();
    }
  });
});

describe('what Parley sends upstream', () => {
  let t: Awaited<ReturnType<typeof withUpstream>>;
  const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
  beforeAll(async () => {
    t = await withUpstream('vllm', (_req, res) => {
      replyJson(res, completionBody('ok', usage));
    });
  });
  afterAll(() => t.close());

  it('drops unknown fields, and tools and response_format for a model not set up for them', async () => {
    const r = await postChat(t.gw, {
      model: 'm', messages, max_completion_tokens: 9, temperature: 0.5, mystery: 1, user: 'u',
      tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'auto', response_format: { type: 'json_object' },
    });
    expect(r.status).toBe(200);
    const sent = t.upstream.received.at(-1)!.body;
    expect(sent).toEqual({ model: 'served-name', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }], max_tokens: 9, temperature: 0.5, user: 'u', cache_salt: expect.any(String) });
  });

  it('always asks a streaming upstream for usage, even when the client did not', async () => {
    t.upstream.setScript((_req, res) => writeEvents(res, [chunk({ content: 'a' }), chunk({}, 'stop'), { ...chunk({}), choices: [], usage }]));
    const r = await postChat(t.gw, { model: 'm', messages, stream: true });
    const text = await r.text();
    expect(t.upstream.received.at(-1)!.body.stream_options).toEqual({ include_usage: true, continuous_usage_stats: false });
    expect(text).not.toContain('"usage"');
    expect(text.trim().endsWith('data: [DONE]')).toBe(true);
  });
});

describe('a model set up for tools and JSON output', () => {
  it('passes tools, tool_choice and response_format on', async () => {
    const t = await withUpstream('openai', (_req, res) => {
      replyJson(res, completionBody('{}', { prompt_tokens: 3, completion_tokens: 1 }));
    }, { supports: { tools: true, jsonOutput: true } });
    try {
      const tools = [{ type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object' } } }];
      await t.gw.client.chat.completions.create({ model: 'm', messages, tools, tool_choice: 'auto', response_format: { type: 'json_object' }, max_tokens: 3 });
      const sent = t.upstream.received[0].body;
      expect(sent.tools).toEqual(tools);
      expect(sent.tool_choice).toBe('auto');
      expect(sent.response_format).toEqual({ type: 'json_object' });
      expect(sent.max_completion_tokens).toBe(3);
      expect(sent.messages[0].role).toBe('developer');
    } finally {
      await t.close();
    }
  });
});

describe('stream quirks', () => {
  const usage = { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 };
  it('reads `data:` without a space and a stream that ends without [DONE]', async () => {
    const t = await withUpstream('llamacpp', (_req, res) =>
      writeEvents(res, [chunk({ role: 'assistant', content: 'he' }), chunk({ content: 'llo' }), chunk({}, 'stop', { usage })], { done: false, separator: '' }));
    try {
      const stream = await t.gw.client.chat.completions.create({ model: 'm', messages, stream: true, stream_options: { include_usage: true } });
      const parts = [];
      let last;
      for await (const c of stream) {
        parts.push(c.choices[0]?.delta.content ?? '');
        last = c;
      }
      expect(parts.join('')).toBe('hello');
      expect(last!.usage!.completion_tokens).toBe(2);
    } finally {
      await t.close();
    }
  });

  it('passes text that is not ASCII on byte for byte, after reads that were all ASCII and with a character split between two reads', async () => {
    // vLLM's framing, which Parley rewrites in runs; the first event, with the role, takes the full parse.
    const piece = (content: string) => ({ id: 'up-1', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }] });
    const events = [chunk({ role: 'assistant', content: 'ok ' }), piece('日本'), piece('é'), piece(' 𝕏'), piece(' ok'), chunk({}, 'stop', { usage })];
    const bytes = Buffer.from(events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n');
    const firstNonAscii = bytes.indexOf(Buffer.from('日本'));
    const split = bytes.indexOf(Buffer.from('𝕏')) + 2;
    const t = await withUpstream('vllm', async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(bytes.subarray(0, firstNonAscii - 20));
      await sleep(20);
      res.write(bytes.subarray(firstNonAscii - 20, split));
      await sleep(20);
      res.end(bytes.subarray(split));
    });
    try {
      const raw = new TextDecoder('utf-8', { fatal: true }).decode(await (await postChat(t.gw, { model: 'm', messages, stream: true })).arrayBuffer());
      const text = parseSse(raw).slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices[0].delta.content ?? '').join('');
      expect(text).toBe('ok 日本é 𝕏 ok');
    } finally {
      await t.close();
    }
  });

  it('keeps the last usage when the upstream sends usage on every chunk', async () => {
    const t = await withUpstream('vllm', (_req, res) =>
      writeEvents(res, [
        chunk({ content: 'a' }, null, { usage: { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11 } }),
        chunk({ content: 'b' }, null, { usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 } }),
        chunk({}, 'stop', { usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12, prompt_tokens_details: { cached_tokens: 8 } } }),
      ]));
    try {
      const raw = await (await postChat(t.gw, { model: 'm', messages, stream: true, stream_options: { include_usage: true } })).text();
      const events = parseSse(raw);
      const usageChunks = events.filter((e) => e.includes('"usage":{'));
      expect(usageChunks).toHaveLength(1);
      expect(JSON.parse(usageChunks[0].slice(6)).usage).toEqual({ prompt_tokens: 10, completion_tokens: 2, total_tokens: 12, prompt_tokens_details: { cached_tokens: 8 } });
      expect(events.at(-1)).toBe('data: [DONE]');
    } finally {
      await t.close();
    }
  });

  it('merges n single-choice calls for an upstream that returns one choice per call', async () => {
    let call = 0;
    const t = await withUpstream('llamacpp', (req, res) => {
      const i = call++;
      expect(req.body.n).toBeUndefined();
      // The content chunk has the exact shape the stream parser reads on its quick path.
      const content = { ...chunk({}), choices: [{ index: 0, delta: { content: `s${req.body.seed}` }, logprobs: null, finish_reason: null }] };
      if (req.body.stream) return writeEvents(res, [content, chunk({}, 'stop'), { ...chunk({}), choices: [], usage: { prompt_tokens: 10, completion_tokens: 1 } }]);
      replyJson(res, completionBody(`reply-${i}`, { prompt_tokens: 10, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 4 + i } }));
    });
    try {
      const r = await t.gw.client.chat.completions.create({ model: 'm', messages, n: 3 });
      expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
      expect(new Set(r.choices.map((c) => c.message.content))).toEqual(new Set(['reply-0', 'reply-1', 'reply-2']));
      expect(r.usage).toEqual({ prompt_tokens: 10, completion_tokens: 9, total_tokens: 19, prompt_tokens_details: { cached_tokens: 4 } });
      const stream = await t.gw.client.chat.completions.create({ model: 'm', messages, n: 2, seed: 100, stream: true, stream_options: { include_usage: true } });
      const byChoice = new Map<number, string>();
      let last;
      for await (const c of stream) {
        for (const ch of c.choices) byChoice.set(ch.index, (byChoice.get(ch.index) ?? '') + (ch.delta.content ?? ''));
        last = c;
      }
      expect(Object.fromEntries(byChoice)).toEqual({ 0: 's100', 1: 's101' });
      expect(last!.usage!.completion_tokens).toBe(2);
    } finally {
      await t.close();
    }
  });
});

describe('an upstream that breaks off mid-reply ends the stream with the error event', () => {
  const errorEvent = { error: { message: expect.stringMatching(/stopped answering/), type: 'server_error', param: null, code: null } };
  const scripts: [string, Parameters<typeof startFakeUpstream>[0]][] = [
    ['dies (connection reset)', async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'par' }))}\n\n`);
      await sleep(20);
      res.socket!.destroy();
    }],
    ['sends a malformed event', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk({ content: 'par' }))}\n\ndata: {"choices": [tru\n\n`);
      res.end();
    }],
    ['sends `event: error`', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify(chunk({ content: 'par' }))}\n\nevent: error\ndata: {"message":"engine crashed"}\n\n`);
    }],
    ['sends an error object as data', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify(chunk({ content: 'par' }))}\n\ndata: {"error":{"message":"CUDA out of memory"}}\n\n`);
    }],
    ['closes before finishing', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify(chunk({ content: 'par' }))}\n\n`);
    }],
  ];
  it.each(scripts)('when it %s', async (_name, script) => {
    const t = await withUpstream('vllm', script);
    try {
      const raw = await (await postChat(t.gw, { model: 'm', messages, stream: true, stream_options: { include_usage: true } })).text();
      const events = parseSse(raw);
      expect(events).not.toContain('data: [DONE]');
      expect(raw).not.toContain('"usage":{');
      expect(JSON.parse(events.at(-1)!.slice(6))).toEqual(errorEvent);
      expect(events.some((e) => e.includes('"content":"par"'))).toBe(true);
    } finally {
      await t.close();
    }
  });

  it('when it stalls past the idle timeout, after keep-alive comments', async () => {
    const t = await withUpstream('vllm', async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk({ content: 'par' }))}\n\n`);
      await sleep(2_000);
      res.end();
    }, {}, { keepAliveMs: 50, upstreamIdleTimeoutMs: 400 });
    try {
      const raw = await (await postChat(t.gw, { model: 'm', messages, stream: true })).text();
      const events = parseSse(raw);
      const keepAlives = events.filter((e) => e === ': keep-alive');
      expect(keepAlives.length).toBeGreaterThanOrEqual(3);
      expect(JSON.parse(events.at(-1)!.slice(6))).toEqual(errorEvent);
    } finally {
      await t.close();
    }
  });

  it('the openai client sees the error event as an error', async () => {
    const t = await withUpstream('vllm', scripts[0][1]);
    try {
      const stream = await t.gw.client.chat.completions.create({ model: 'm', messages, stream: true });
      const err = await (async () => {
        for await (const _ of stream) { /* drain */ }
      })().catch((e) => e);
      expect(err).toBeInstanceOf(Error);
      expect(String(err.message)).toMatch(/stopped answering/);
    } finally {
      await t.close();
    }
  });
});

describe('keep-alive comments', () => {
  it('go out at the configured interval while the upstream is silent, and the reply still completes', async () => {
    const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
    const t = await withUpstream('sglang', async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      await sleep(300);
      res.end([chunk({ content: 'late' }), chunk({}, 'stop'), { ...chunk({}), choices: [], usage }].map((e) => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n');
    }, {}, { keepAliveMs: 40 });
    try {
      const raw = await (await postChat(t.gw, { model: 'm', messages, stream: true })).text();
      const events = parseSse(raw);
      expect(events.filter((e) => e === ': keep-alive').length).toBeGreaterThanOrEqual(4);
      expect(events.at(-1)).toBe('data: [DONE]');
      expect(raw).toContain('"content":"late"');
    } finally {
      await t.close();
    }
  });
});

describe('a client that disconnects', () => {
  it('aborts the upstream request at once', async () => {
    const t = await withUpstream('vllm', async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < 200 && !res.destroyed; i++) {
        res.write(`data: ${JSON.stringify(chunk({ content: 'x' }))}\n\n`);
        await sleep(20);
      }
      res.end();
    });
    try {
      const controller = new AbortController();
      const res = await postChat(t.gw, { model: 'm', messages, stream: true }).then((r) => r);
      const reader = res.body!.getReader();
      await reader.read();
      const started = Date.now();
      controller.abort();
      await reader.cancel();
      await t.upstream.aborted;
      expect(Date.now() - started).toBeLessThan(1_000);
    } finally {
      await t.close();
    }
  });
});

describe('context window', () => {
  it('is decided before any upstream call when the routing file names a tokenizer', async () => {
    const tokenizer = ensureDefaultModel(join(process.cwd(), '.parley-test', 'tokenizer.gguf'));
    const t = await withUpstream('vllm', (_req, res) => void res.end(), { contextWindow: 64, tokenizer: { gguf: tokenizer } });
    try {
      const err = await t.gw.client.chat.completions.create({ model: 'm', messages, max_tokens: 60 }).catch((e) => e);
      expect(err.status).toBe(400);
      expect(err.code).toBe('context_length_exceeded');
      expect(err.param).toBe('messages');
      expect(err.message).toMatch(/maximum context length is 64 tokens/);
      expect(t.upstream.received).toHaveLength(0);
    } finally {
      await t.close();
    }
  });

  const upstreamErrors: [string, number, unknown][] = [
    ['llamacpp', 400, { error: { code: 400, message: 'the request exceeds the available context size', type: 'exceed_context_size_error', n_prompt_tokens: 5000, n_ctx: 4096 } }],
    ['vllm', 400, { object: 'error', message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens", type: 'BadRequestError', param: null, code: 400 }],
    ['openai', 400, { error: { message: 'context too long', type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } }],
  ];
  it.each(upstreamErrors)('is mapped from the upstream own context error (%s) to a 400, never a 5xx', async (kind, status, body) => {
    const t = await withUpstream(kind, (_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    });
    try {
      for (const stream of [false, true]) {
        const r = await postChat(t.gw, { model: 'm', messages, stream });
        expect(r.status).toBe(400);
        const e = (await r.json()).error;
        expect(e.code).toBe('context_length_exceeded');
        expect(e.param).toBe('messages');
      }
    } finally {
      await t.close();
    }
  });
});

describe('upstream failures before the reply', () => {
  it('a 5xx from the upstream is a 502 in OpenAI shape', async () => {
    const t = await withUpstream('vllm', (_req, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"object":"error","message":"engine dead","code":500}');
    });
    try {
      const r = await postChat(t.gw, { model: 'm', messages });
      expect(r.status).toBe(502);
      expect((await r.json()).error).toMatchObject({ type: 'server_error', code: 'upstream_error' });
    } finally {
      await t.close();
    }
  });

  it('an unreachable upstream is a 502, then a 503 with Retry-After while its circuit is open', async () => {
    const upstream: FakeUpstream = await startFakeUpstream((_req, res) => void res.end());
    await upstream.close();
    const gw: TestGateway = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    try {
      const first = await postChat(gw, { model: 'm', messages });
      expect(first.status).toBe(502);
      expect((await first.json()).error.code).toBe('upstream_unreachable');
      const second = await postChat(gw, { model: 'm', messages });
      expect(second.status).toBe(503);
      expect(second.headers.get('retry-after')).toBe('5');
    } finally {
      await gw.close();
    }
  });
});
