import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import type { StreamEvent } from '../../src/protocol/chat-response.js';
import { nativeContentRuns, regexContentRuns } from '../../src/upstream/content-runs.js';
import { SseParser, type SseEvent } from '../../src/upstream/sse-parser.js';

type Read = (SseEvent | StreamEvent)[];

/** ASCII text's bytes, as the body hands them on. */
const bytesOf = (text: string) => Buffer.from(text, 'latin1');

/**
 * What a reader makes of a stream fed in `reads` (all ASCII): every event as
 * the relay would see it, runs rendered between framing that names their
 * choice. A run may be read as several, so runs are compared by what they
 * render, not by how they were cut.
 */
function transcript(reader: typeof regexContentRuns, reads: string[], before = (i: number) => `<${i}|`, after = '|>\n'): { text: string; pieces: number } {
  const parser = new SseParser(reader);
  const events: Read = [];
  for (const read of reads) events.push(...parser.push(bytesOf(read)));
  events.push(...parser.end());
  let text = '';
  let pieces = 0;
  for (const e of events) {
    if ('data' in e) text += `event ${e.event} ${JSON.stringify(e.data)}\n`;
    else if (e.content) {
      text += e.content.render(before(e.content.index), after);
      pieces += e.content.pieces;
    }
  }
  return { text, pieces };
}

/** The text cut at the given places, as reads from the network come. */
const cut = (text: string, at: number[]) => {
  const points = [...new Set(at.map((a) => a % (text.length + 1)))].sort((a, b) => a - b);
  return [...points, text.length].map((end, i) => text.slice(i === 0 ? 0 : points[i - 1], end));
};

// A piece of content as an upstream may write it: plain, escaped, \u-escaped, or (rarely) not a valid literal at all.
const asciiText = fc.string({ unit: fc.constantFrom(...'ab $"\\/\n\t\u0001é}{:,'.split('')), maxLength: 6 });
const literal = fc.oneof(
  { weight: 6, arbitrary: asciiText.map((t) => JSON.stringify(t).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)) },
  { weight: 1, arbitrary: fc.constantFrom('""', '"a\\x"', '"raw\u0001"', '"\\u12"', '"open', '"a\\"') },
);
/** How an upstream frames its plain content events: one way for nearly all of a stream. */
const framing = (odd: boolean) =>
  fc.record({
    id: fc.constantFrom('up', 'chatcmpl-1', '', ...(odd ? ['bad"id'] : [])),
    created: fc.constantFrom('1', '1795509253', ...(odd ? ['-1'] : [])),
    model: fc.constantFrom('m', 'bench', ...(odd ? ['m\\x'] : [])),
    fingerprint: fc.constantFrom('', '"system_fingerprint":null,', '"system_fingerprint":"fp_1",', '"service_tier":"default","system_fingerprint":null,',
      ...(odd ? ['"system_fingerprint":1,', '"service_tier":"a\\"b",'] : [])),
    stop: fc.constantFrom('', ',"stop_reason":null', ',"token_ids":null', ',"stop_reason":null,"token_ids":null', ',"token_ids":null,"stop_reason":null', ',"matched_stop":null',
      ...(odd ? [',"token_ids":[1]', ',"stop_reason":"x"'] : [])),
    usage: fc.constantFrom('', ',"usage":null', ',"prompt_token_ids":null', ',"usage":null,"prompt_token_ids":null', ',"obfuscation":"D5jIQ"', ',"obfuscation":"","usage":null',
      ...(odd ? [',"usage":nul', ',"prompt_token_ids":[1]', ',"obfuscation":"a\\u0041"', ',"obfuscation":7'] : [])),
    logprobs: fc.constantFrom('null', ...(odd ? ['{"content":[]}'] : [])),
  });
type Framing = Record<'id' | 'created' | 'model' | 'fingerprint' | 'stop' | 'usage' | 'logprobs', string>;
const plainEvent = (f: Framing, index: string, content: string) =>
  `data: {"id":"${f.id}","object":"chat.completion.chunk","created":${f.created},"model":"${f.model}",${f.fingerprint}"choices":[{"index":${index},"delta":{"content":${content}},"logprobs":${f.logprobs},"finish_reason":null${f.stop}}]${f.usage}}\n\n`;
const index = fc.constantFrom('0', '0', '0', '1', '00', '12');
const otherEvent = fc.constantFrom(
  'data: {"id":"up","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n',
  'data: {"id":"up","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
  'data:{"id":"up","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}]}\n\n',
  'data: {"id":"up","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}]}\r\n\r\n',
  ': keep-alive\n\n',
  'event: error\ndata: {"error":{"message":"boom"}}\n\n',
  'data: [DONE]\n\n',
);
const stream = fc.tuple(framing(false), fc.array(fc.oneof(
  { weight: 8, arbitrary: fc.tuple(index, literal) },
  { weight: 1, arbitrary: fc.tuple(framing(true), index, literal) },
  { weight: 1, arbitrary: otherEvent },
  // Whatever an upstream might send: the native reader is handed any text after a run's first event.
  { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(...'data: {"id\\}]\n\r,0:ux'.split('')), maxLength: 30 }) },
), { maxLength: 40 })).map(([usual, events]) =>
  events.map((e) => (typeof e === 'string' ? e : e.length === 2 ? plainEvent(usual, ...e) : plainEvent(...e))).join(''),
);

describe.runIf(nativeContentRuns)('the native reader of content runs', () => {
  const native = nativeContentRuns!;

  it('reads every stream as the regular expressions do, however its reads are cut', () => {
    fc.assert(
      fc.property(stream, fc.array(fc.nat(), { maxLength: 6 }), (sse, at) => {
        const reads = cut(sse, at);
        expect(transcript(native, reads)).toEqual(transcript(regexContentRuns, reads));
      }),
      { numRuns: 1000 },
    );
  });

  const vllmFraming: Framing = { id: 'chatcmpl-1', created: '1795509253', model: 'bench', fingerprint: '', stop: ',"stop_reason":null', usage: '', logprobs: 'null' };
  const longReply = plainEvent(vllmFraming, '0', '" tok"').repeat(300) + 'data: [DONE]\n\n';

  it('reads a long run as the regular expressions do, rendered the same with framing that is not ASCII', () => {
    const before = (i: number) => `data: {"model":"modèle-$1","index":${i},"content":`;
    const read = transcript(native, [longReply], before, '}é\n\n');
    expect(read.pieces).toBe(300);
    expect(read).toEqual(transcript(regexContentRuns, [longReply], before, '}é\n\n'));
  });

  // The addon the reader loaded: Node loads a native module once per process.
  const addon = createRequire(import.meta.url)('../../build/Release/content_runs.node') as { scan: (...args: unknown[]) => string | null };

  it('reads the bytes it is handed where they lie, from where the text is read', () => {
    const scan = vi.spyOn(addon, 'scan');
    try {
      const sse = ': keep-alive\n\n' + longReply;
      const bytes = bytesOf(sse);
      const [run] = new SseParser(native).push(bytes) as StreamEvent[];
      expect(run.content!.pieces).toBe(300);
      // Every scan reads the reply's own bytes, not a copy of its text; one reads the whole run, from where it starts.
      expect(scan.mock.calls.every(([read]) => read === bytes)).toBe(true);
      const found = scan.mock.results.flatMap((r, i) => (r.value === null ? [] : [scan.mock.calls[i][1]]));
      expect(found).toEqual([': keep-alive\n\n'.length]);
    } finally {
      scan.mockRestore();
    }
  });

  it('decodes none of the bytes of a run it reads', () => {
    const toString = vi.spyOn(Buffer.prototype, 'toString');
    try {
      const [run] = new SseParser(native).push(bytesOf(longReply)) as StreamEvent[];
      expect(run.content!.pieces).toBe(300);
      // Only the event after the run is decoded.
      expect(toString.mock.results.map((r) => r.value)).toEqual(['data: [DONE]\n\n']);
    } finally {
      toString.mockRestore();
    }
  });

  it('reads a run itself, however the upstream frames it', () => {
    const scan = vi.spyOn(addon, 'scan');
    try {
      fc.assert(
        fc.property(framing(false), (f) => {
          scan.mockClear();
          const sse = plainEvent(f, '0', '"a"') + plainEvent(f, '0', '"b"');
          const [run] = new SseParser(native).push(bytesOf(sse)) as StreamEvent[];
          expect(run.content!.pieces).toBe(2);
          expect(scan.mock.results.map((r) => r.value)).toEqual(['"a"\0"b"\0']);
        }),
      );
    } finally {
      scan.mockRestore();
    }
  });

  it('leaves text not known to be ASCII to the regular expressions', () => {
    const scan = vi.spyOn(addon, 'scan');
    try {
      const [run] = new SseParser(native).push(longReply) as StreamEvent[];
      expect(run.content!.pieces).toBe(300);
      expect(scan).not.toHaveBeenCalled();
    } finally {
      scan.mockRestore();
    }
  });
});

describe('choosing a reader of content runs', () => {
  it('builds the native reader where the machine has a C++ compiler', () => {
    let compiler = true;
    try {
      execFileSync('sh', ['-c', 'command -v c++ || command -v g++'], { stdio: 'ignore' });
    } catch {
      compiler = false;
    }
    expect(nativeContentRuns !== undefined).toBe(compiler);
  });

  it('reads with the regular expressions alone when PARLEY_NATIVE_STREAMS=0', async () => {
    vi.resetModules();
    vi.stubEnv('PARLEY_NATIVE_STREAMS', '0');
    try {
      const runs = await import('../../src/upstream/content-runs.js');
      expect(runs.nativeContentRuns).toBeUndefined();
      expect(runs.plainContentRuns).toBe(runs.regexContentRuns);
    } finally {
      vi.unstubAllEnvs();
      vi.resetModules();
    }
  });
});
