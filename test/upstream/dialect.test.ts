import { describe, expect, it } from 'vitest';
import type { ContentRun, StreamEvent } from '../../src/protocol/chat-response.js';
import { UpstreamBrokeOff } from '../../src/upstream/dialect.js';
import { DIALECTS } from '../../src/upstream/dialects/index.js';

const vllm = DIALECTS.vllm;
const event = (data: unknown) => ({ event: undefined, data: typeof data === 'string' ? data : JSON.stringify(data) });

/** A run's pieces, spelled out through its own rendering. */
const piecesOf = (run: ContentRun): string[] => JSON.parse(`[${run.render('', ',').slice(0, -1)}]`);

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
    const e = DIALECTS.deepseek.streamEvent(event({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, prompt_cache_hit_tokens: 50 } }));
    expect(e.usage!.cached_tokens).toBe(5);
  });

  it('reads a stream the same through its parser\'s quick path as event by event on the full parse', () => {
    const texts = ['plain', 'he said "hi"\n\u00e9', '', 'tab\there \\ back'];
    const chunks = texts.map((content, i) => ({ ...plain, choices: [{ ...plain.choices[0], index: i % 2, delta: { content } }] }));
    const sse = chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n';
    // The quick path gathers a choice's consecutive pieces into one run; spelled out, they are the full parse's deltas.
    const quick = vllm.streamParser().push(sse).flatMap((e) => {
      if ('data' in e) return [vllm.streamEvent(e)];
      return e.content ? piecesOf(e.content).map((content) => ({ choices: [{ index: e.content!.index, delta: { content }, logprobs: null, finish_reason: null }] })) : [e];
    });
    const full = chunks.map((c) => vllm.streamEvent({ event: undefined, data: JSON.stringify({ choices: c.choices, model: c.model, id: c.id }) }));
    expect(quick).toEqual([...full, { done: true }]);
  });

  it("reads a stream's ASCII bytes as it reads its text, however the reads are cut", () => {
    const chunk = (index: number, delta: object, finish: string | null) => ({ ...plain, choices: [{ index, delta, logprobs: null, finish_reason: finish }] });
    const chunks = [
      chunk(0, { role: 'assistant', content: '' }, null), chunk(1, { role: 'assistant', content: '' }, null),
      ...['Hel', 'lo "x"', ' \u00e9\n'].map((content, i) => chunk(i % 2, { content }, null)),
      chunk(0, { content: 'a' }, null), chunk(0, { content: 'b' }, null), chunk(0, {}, 'stop'), chunk(1, {}, 'length'),
      { ...plain, choices: [], usage: { prompt_tokens: 9, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 4 } } },
    ];
    // ASCII, as JSON.stringify leaves it once other characters are escaped.
    const sse = ': keep-alive\n\n' + chunks.map((c) => `data: ${JSON.stringify(c).replace(/[^\x00-\x7f]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`)}\n\n`).join('') + 'data: [DONE]\n\n';
    /** Every event as the full parse makes it, runs spelled out piece by piece. */
    const spelled = (events: ReturnType<ReturnType<typeof vllm.streamParser>['push']>) => events.flatMap((e) => {
      if ('data' in e) return [vllm.streamEvent(e)];
      return e.content ? piecesOf(e.content).map((content) => ({ choices: [{ index: e.content!.index, delta: { content }, logprobs: null, finish_reason: null }] })) : [e];
    });
    const asText = spelled(vllm.streamParser().push(sse));
    expect(asText).toHaveLength(chunks.length + 1);
    for (let at = 0; at <= sse.length; at += 3) {
      const parser = vllm.streamParser();
      const events = [...parser.push(Buffer.from(sse.slice(0, at))), ...parser.push(Buffer.from(sse.slice(at))), ...parser.end()];
      expect(spelled(events)).toEqual(asText);
    }
  });

  it('gathers consecutive plain pieces of one choice into one run, and starts a new run when the choice changes', () => {
    const piece = (index: number, content: string) => `data: ${JSON.stringify({ ...plain, choices: [{ ...plain.choices[0], index, delta: { content } }] })}\n\n`;
    const events = vllm.streamParser().push(piece(0, 'a') + piece(0, 'b') + piece(1, 'c') + piece(0, '') + piece(0, 'd'));
    expect(events.map((e) => ('data' in e ? vllm.streamEvent(e) : e.content ? { index: e.content.index, pieces: piecesOf(e.content), count: e.content.pieces } : e))).toEqual([
      { index: 0, pieces: ['a', 'b'], count: 2 },
      { index: 1, pieces: ['c'], count: 1 },
      // An empty piece is no token: it comes out as the full parse makes it, and ends the run.
      { choices: [{ index: 0, delta: { content: '' }, logprobs: null, finish_reason: null }] },
      { index: 0, pieces: ['d'], count: 1 },
    ]);
  });

  it("reads current vLLM's, SGLang's and OpenAI's content chunks, with the fields Parley drops, as runs", () => {
    // As vLLM (with token_ids since 0.10.2), SGLang (matched_stop) and OpenAI (service tier, padding) write them.
    const vllmNow = (content: string) =>
      `data: {"id":"chatcmpl-f42e8ae7ddb346e1adfba47e3d710b46","object":"chat.completion.chunk","created":1760031300,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n`;
    const sglang = (content: string) =>
      `data: {"id":"c7a59cdb72e24ebd99d9821ebc0e4b8a","object":"chat.completion.chunk","created":1788360234,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n`;
    let padding = 0;
    const openai = (content: string) =>
      `data: {"id":"chatcmpl-C3jmyBQgTgsLd421Wg8fBhM0xkOiK","object":"chat.completion.chunk","created":1755007032,"model":"gpt-4-0613","service_tier":"default","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null}],"obfuscation":"${'D5jIQAiER0kD2'.slice(++padding)}"}\n\n`;
    for (const shape of [vllmNow, sglang, openai]) {
      const events = vllm.streamParser().push(shape('Okay') + shape('.') + shape(' Sure'));
      expect(events).toHaveLength(1);
      const [run] = events as StreamEvent[];
      expect({ pieces: piecesOf(run.content!), count: run.content!.pieces }).toEqual({ pieces: ['Okay', '.', ' Sure'], count: 3 });
    }
  });

  it('copies each piece as the literal the upstream wrote, between text taken as it is', () => {
    // The second piece spells out the framing that ends a piece, escaped as JSON escapes it: still one piece.
    const literals = ['"caf\\u00e9 \\"q\\""', JSON.stringify('"},"logprobs":null,"finish_reason":null}]}\n\ndata: {"delta":{"content":"'), '"$1"'];
    const sse = literals.map((l) => `data: {"id":"u","object":"chat.completion.chunk","created":1,"model":"x","choices":[{"index":0,"delta":{"content":${l}},"logprobs":null,"finish_reason":null}]}\n\n`).join('');
    const [run] = vllm.streamParser().push(sse) as StreamEvent[];
    expect(run.content!.pieces).toBe(3);
    // Dollar signs in the surrounding text (a model id may have them) are not replacement patterns.
    expect(run.content!.render('<$1 $& $$>', '<$`>')).toBe(literals.map((l) => `<$1 $& $$>${l}<$\`>`).join(''));
  });

  it('leaves a plain-looking chunk with a raw control character to the full parse, which refuses it as JSON does', () => {
    const raw = `data: ${JSON.stringify(plain).replace('\\n', '\n')}\n\n`;
    const [e] = vllm.streamParser().push(raw);
    expect('data' in e).toBe(true);
    expect(() => vllm.streamEvent(e as { event: undefined; data: string })).toThrow(UpstreamBrokeOff);
  });

  it('still refuses, through the stream parser, a plain-looking chunk whose content is not valid JSON', () => {
    const broken = JSON.stringify(plain).replace('\\n', '\\x');
    const [event] = vllm.streamParser().push(`data: ${broken}\n\n`);
    expect('data' in event).toBe(true);
    expect(() => vllm.streamEvent(event as { event: undefined; data: string })).toThrow(UpstreamBrokeOff);
  });
});
