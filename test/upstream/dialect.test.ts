import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { StreamEvent } from '../../src/protocol/chat-response.js';
import type { GenerationMapping } from '../../src/upstream/dialect.js';
import { UpstreamBrokeOff } from '../../src/upstream/upstream-broke-off.js';
import { SseParser, type SseEvent } from '../../src/upstream/sse-parser.js';
import { DIALECTS } from '../../src/upstream/dialects/index.js';

const vllm = DIALECTS.vllm.chat;
const event = (data: unknown) => ({ event: undefined, data: typeof data === 'string' ? data : JSON.stringify(data) });


describe('reading stream events', () => {
  const plain = { id: 'c-1', object: 'chat.completion.chunk', created: 5, model: 'x', choices: [{ index: 2, delta: { content: 'he said "hi"\n\u00e9' }, logprobs: null, finish_reason: null }] };

  it('reads a plain content chunk and the same chunk with its fields reordered alike', () => {
    const inOrder = vllm.streamEvent(event(plain));
    const reordered = vllm.streamEvent(event({ choices: [{ finish_reason: null, delta: { content: 'he said "hi"\n\u00e9' }, index: 2 }], model: 'x', id: 'c-1' }));
    expect(inOrder).toEqual({ choices: [{ index: 2, delta: { content: 'he said "hi"\n\u00e9' }, logprobs: null, finish_reason: null }] });
    expect(reordered).toEqual(inOrder);
  });

  it('reads content without escapes, raw unicode included, the same as JSON.parse would', () => {
    for (const content of [' tok', 'é 𝕏 日本', '', "it's < & >"]) {
      const e = vllm.streamEvent(event({ ...plain, choices: [{ ...plain.choices[0], delta: { content } }] }));
      expect(e.choices![0].delta.content).toBe(content);
    }
  });

  it('still refuses a plain-looking chunk whose content is not valid JSON', () => {
    const broken = JSON.stringify(plain).replace('\\n', '\\x');
    expect(() => vllm.streamEvent(event(broken))).toThrow(UpstreamBrokeOff);
  });

  it('reads usage and finish_reason from the full parse', () => {
    const e = vllm.streamEvent(event({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 9, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 4 } } }));
    expect(e.choices![0].finish_reason).toBe('stop');
    expect(e.usage).toEqual({ prompt_tokens: 9, completion_tokens: 3, cached_tokens: 4 });
  });

  it('never reports more cached tokens than prompt tokens', () => {
    const e = DIALECTS.deepseek.chat.streamEvent(event({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, prompt_cache_hit_tokens: 50 } }));
    expect(e.usage!.cached_tokens).toBe(5);
  });

  it('leaves a chunk with a raw control character in its content to the full parse, which refuses it as JSON does', () => {
    const raw = `data: ${JSON.stringify(plain).replace('\\n', '\n')}\n\n`;
    const [e] = vllm.streamParser().push(raw);
    expect('data' in e).toBe(true);
    expect(() => vllm.streamEvent(e as SseEvent)).toThrow(UpstreamBrokeOff);
  });
});

describe('what a model or a server writes where OpenAI writes otherwise', () => {
  const usage = { prompt_tokens: 3, completion_tokens: 1 };

  it("passes over a whole reply's choices and tool calls that are not objects, and takes a call's arguments sent as an object as their JSON", () => {
    const reply = vllm.whole({
      choices: [null, 7, { index: 0, message: { role: 'assistant', content: null, tool_calls: [null, 'x', { function: { name: 'f', arguments: { a: 1 } } }, { id: 'c', type: 'function', function: { name: 5, arguments: '{}' } }] }, finish_reason: false }],
      usage,
    });
    expect(reply.choices).toEqual([
      {
        index: 0,
        message: { role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{"a":1}' } }, { id: 'c', type: 'function', function: { name: '', arguments: '{}' } }] },
        logprobs: null,
        finish_reason: 'stop',
      },
    ]);
  });

  it('fails a whole reply with no choice that is an object as one broken off', () => {
    for (const choices of [[], [null], 'x']) expect(() => vllm.whole({ choices, usage })).toThrow(UpstreamBrokeOff);
  });

  it("passes over a streamed event's choices, tool call pieces and logprobs that are not objects, and a finish_reason that is not a string", () => {
    const e = vllm.streamEvent(event({ choices: [null, { index: 0, delta: { tool_calls: [null, { index: 0, function: { arguments: { a: 1 } } }] }, logprobs: { content: [null, { token: 't', logprob: -1, top_logprobs: [null] }] }, finish_reason: 0 }] }));
    expect(e.choices).toEqual([
      { index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"a":1}' } }] }, logprobs: { content: [{ token: 't', logprob: -1, bytes: null, top_logprobs: [] }] }, finish_reason: null },
    ]);
  });
});

describe('quirks each dialect names', () => {
  const streamed = (kind: keyof typeof DIALECTS, sse: string) => {
    const api = DIALECTS[kind].chat;
    return () => api.streamParser().push(sse).map((e) => ('data' in e ? api.streamEvent(e) : e));
  };

  it("fails llama.cpp's stream on its `error:` line", () => {
    const sse = 'error: {"code":500,"message":"slot unavailable"}\n\n';
    expect(streamed('llamacpp', sse)).toThrow(/slot unavailable/);
    expect(streamed('vllm', sse)()).toEqual([]);
  });

  it("fails vLLM's and SGLang's streams on their `object: error` bodies, which OpenAI's reading takes for an empty chunk", () => {
    const sse = 'data: {"object":"error","message":"engine dead","code":500}\n\n';
    expect(streamed('vllm', sse)).toThrow(/engine dead/);
    expect(streamed('sglang', sse)).toThrow(/engine dead/);
    expect(streamed('openai', sse)()).toEqual([{}]);
  });

  it("reads newer vLLM's reasoning under `reasoning`, as reasoning_content", () => {
    const sse = 'data: {"choices":[{"index":0,"delta":{"reasoning":"Hmm."},"finish_reason":null}]}\n\n';
    expect(streamed('vllm', sse)()).toEqual([{ choices: [{ index: 0, delta: { reasoning_content: 'Hmm.' }, logprobs: null, finish_reason: null }] }]);
    expect(streamed('deepseek', sse)()).toEqual([{ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: null }] }]);
  });

  it("takes llama.cpp's typed context error for one whatever its message says", () => {
    const body = JSON.stringify({ error: { code: 400, message: 'n_ctx reached', type: 'exceed_context_size_error' } });
    expect(DIALECTS.llamacpp.error(400, body).code).toBe('context_length_exceeded');
    expect(DIALECTS.vllm.error(400, body).code).not.toBe('context_length_exceeded');
  });
});

describe("each dialect's quick path", () => {
  /** Every event as the relay sees it, runs spelled out piece by piece, so that the quick path and the full parse can be compared. */
  const spelled = (dialect: GenerationMapping<unknown>, events: (SseEvent | StreamEvent)[]): StreamEvent[] =>
    events.flatMap((e) => {
      if ('data' in e) return [dialect.streamEvent(e)];
      if (!e.content) return [e];
      const pieces: string[] = JSON.parse(`[${e.content.render('', ',').slice(0, -1)}]`);
      return pieces.map((content) => ({ choices: [{ index: e.content!.index, delta: { content }, logprobs: null, finish_reason: null }] }));
    });
  /** The same events, each parsed alone as JSON (no quick path). */
  const parsedAlone = (dialect: GenerationMapping<unknown>, sse: string) => new SseParser().push(sse).map((e) => dialect.streamEvent(e as SseEvent));

  it.each([
    ['vllm', 'vllm-reasoning.sse'],
    ['sglang', 'sglang-parallel-tools.sse'],
    ['deepseek', 'deepseek-reasoning.sse'],
    ['openai', 'openai-refusal-opening.sse'],
    ['llamacpp', 'llamacpp-logprobs.sse'],
  ] as const)("reads %s's recorded stream as its full parse does, however the reads are cut", (kind, name) => {
    const sse = readFileSync(new URL(`../fixtures/upstream/${name}`, import.meta.url), 'utf8');
    const dialect = DIALECTS[kind].chat;
    const expected = parsedAlone(dialect, sse);
    for (let at = 0; at <= sse.length; at += 7) {
      const parser = dialect.streamParser();
      expect(spelled(dialect, [...parser.push(sse.slice(0, at)), ...parser.push(sse.slice(at)), ...parser.end()])).toEqual(expected);
    }
  });

  it("reads the plain content of vLLM's, SGLang's and OpenAI's chunks, with the fields each drops, as one run", () => {
    const cases: [keyof typeof DIALECTS, (content: string) => string][] = [
      ['vllm', (c) => `data: {"id":"chatcmpl-f42e","object":"chat.completion.chunk","created":1760031300,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(c)}},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n`],
      ['sglang', (c) => `data: {"id":"c7a5","object":"chat.completion.chunk","created":1788360234,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(c)}},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n`],
      ['openai', (c) => `data: {"id":"chatcmpl-C3","object":"chat.completion.chunk","created":1755007032,"model":"gpt-4o","service_tier":"default","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":${JSON.stringify(c)}},"logprobs":null,"finish_reason":null}],"obfuscation":"D5jIQ"}\n\n`],
    ];
    for (const [kind, shape] of cases) {
      const events = DIALECTS[kind].chat.streamParser().push(shape('Okay') + shape('.') + shape(' "Sure"'));
      expect(events).toHaveLength(1);
      const run = (events[0] as StreamEvent).content!;
      expect(run.pieces).toBe(3);
      expect(run.render('<', '>')).toBe('<"Okay"><"."><" \\"Sure\\"">');
    }
  });

  it("leaves another dialect's dropped fields to the full parse: each names only its own", () => {
    const sglangChunk = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n';
    expect('data' in DIALECTS.vllm.chat.streamParser().push(sglangChunk)[0]).toBe(true);
    expect('data' in DIALECTS.sglang.chat.streamParser().push(sglangChunk)[0]).toBe(false);
  });

  it('copies each piece as the literal the upstream wrote, dollar signs in the framing taken as they are', () => {
    const literals = ['"caf\\u00e9 \\"q\\""', JSON.stringify('"},"logprobs":null,"finish_reason":null}]}\n\ndata: {"delta":{"content":"'), '"$1"'];
    const sse = literals.map((l) => `data: {"id":"u","object":"chat.completion.chunk","created":1,"model":"x","choices":[{"index":0,"delta":{"content":${l}},"logprobs":null,"finish_reason":null}]}\n\n`).join('');
    const [event] = DIALECTS.vllm.chat.streamParser().push(sse) as StreamEvent[];
    expect(event.content!.pieces).toBe(3);
    expect(event.content!.render('<$1 $& $$>', '<$`>')).toBe(literals.map((l) => `<$1 $& $$>${l}<$\`>`).join(''));
  });
});
