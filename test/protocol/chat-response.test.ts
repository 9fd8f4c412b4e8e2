// The chunk renderer alone: what it writes must be exactly the JSON that
// JSON.stringify would write for the same chunk, whatever the text.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChunkRenderer } from '../../src/protocol/chat-response.js';

const identity = { id: 'chatcmpl-1', created: 7, model: 'm' };
const chunks = (text: string) =>
  text
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => e.slice('data: '.length));

describe('ChunkRenderer', () => {
  it('writes every piece of text as JSON.stringify would: quotes, backslashes, control characters, lone surrogates', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.string({ unit: 'binary' }), fc.constantFrom('"', '\\', '\n', '\u0000', '\ud800', 'é 😀')), { minLength: 1 }), (pieces) => {
        const renderer = new ChunkRenderer(identity, true);
        const text = renderer.deltas(pieces.map((content) => ({ index: 0, delta: { content }, logprobs: null, finish_reason: null })));
        const expected = [
          { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 7, model: 'm', system_fingerprint: null, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], usage: null },
          ...pieces.map((content) => ({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 7, model: 'm', system_fingerprint: null, choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }], usage: null })),
        ].map((c) => JSON.stringify(c));
        expect(chunks(text)).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });

  it('writes a run of pieces exactly as it writes the same pieces one delta each', () => {
    fc.assert(
      fc.property(fc.array(fc.string({ unit: 'binary' }), { minLength: 1 }), fc.integer({ min: 0, max: 3 }), (texts, index) => {
        const asDeltas = new ChunkRenderer(identity, false).deltas(texts.map((content) => ({ index, delta: { content }, logprobs: null, finish_reason: null })));
        const run = { index, pieces: texts.length, render: (before: string, after: string) => texts.map((t) => before + JSON.stringify(t) + after).join('') };
        expect(new ChunkRenderer(identity, false).content(run)).toBe(asDeltas);
      }),
      { numRuns: 200 },
    );
  });
});
