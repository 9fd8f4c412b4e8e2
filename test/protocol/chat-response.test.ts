// The chunk renderer alone: what it writes must be exactly the JSON that
// JSON.stringify would write for the same chunk, whatever the text.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChunkRenderer, renderCompletion, type ChoiceDelta } from '../../src/protocol/chat-response.js';
import { TextChunkRenderer } from '../../src/protocol/completions.js';

const identity = { id: 'chatcmpl-1', created: 7, model: 'm', serviceTier: 'default' };
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
          { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 7, model: 'm', service_tier: 'default', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], usage: null },
          // An empty piece says nothing and is not sent.
          ...pieces.filter((content) => content !== '').map((content) => ({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 7, model: 'm', service_tier: 'default', choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }], usage: null })),
        ].map((c) => JSON.stringify(c));
        expect(chunks(text)).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });

  it('opens a choice with one chunk, however the upstream opened it, and sends no delta that says nothing, nor an empty piece of text', () => {
    const renderer = new ChunkRenderer(identity, false);
    const text = renderer.deltas([
      { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
      { index: 0, delta: { content: '' }, logprobs: null, finish_reason: null },
      { index: 0, delta: { role: 'assistant' }, logprobs: null, finish_reason: null },
      { index: 0, delta: { content: 'hi' }, logprobs: null, finish_reason: null },
      // Still sent: a finish_reason, or logprobs, even with no text.
      { index: 0, delta: { content: '' }, logprobs: { content: [] }, finish_reason: null },
      { index: 0, delta: { content: '' }, logprobs: null, finish_reason: 'stop' },
    ]);
    expect(chunks(text).map((c) => JSON.parse(c).choices[0])).toEqual([
      { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
      { index: 0, delta: { content: 'hi' }, logprobs: null, finish_reason: null },
      { index: 0, delta: {}, logprobs: { content: [] }, finish_reason: null },
      { index: 0, delta: {}, logprobs: null, finish_reason: 'stop' },
    ]);
  });

  it("gives a tool call's id, type and name to its first piece only, as OpenAI does, whatever the upstream repeats", () => {
    const renderer = new ChunkRenderer(identity, false);
    const call = (index: number, args: string) => ({ index, id: `call_${index}`, type: 'function', function: { name: 'lookup', arguments: args } });
    const text = renderer.deltas([0, 1, 0, 1].map((t, i) => ({ index: 0, delta: { tool_calls: [call(t, `a${i}`)] }, logprobs: null, finish_reason: null })));
    expect(chunks(text).slice(1).map((c) => JSON.parse(c).choices[0].delta.tool_calls[0])).toEqual([
      call(0, 'a0'),
      call(1, 'a1'),
      { index: 0, function: { arguments: 'a2' } },
      { index: 1, function: { arguments: 'a3' } },
    ]);
  });

  it("gives a call its id, type and name where the upstream left them out, and counts a choice's calls from 0 where it did not", () => {
    const renderer = new ChunkRenderer(identity, false);
    const text = renderer.deltas([
      { index: 0, delta: { tool_calls: [{ index: 2, function: { arguments: '{"a"' } }] }, logprobs: null, finish_reason: null },
      { index: 0, delta: { tool_calls: [{ index: 2, function: { arguments: ':1}' } }] }, logprobs: null, finish_reason: null },
      { index: 0, delta: { tool_calls: [{ index: 5, id: 'up', type: 'function', function: { name: 'f' } }] }, logprobs: null, finish_reason: 'tool_calls' },
    ]);
    expect(chunks(text).slice(1).map((c) => JSON.parse(c).choices[0].delta.tool_calls[0])).toEqual([
      { index: 0, id: 'call_chatcmpl-1_0_0', type: 'function', function: { name: '', arguments: '{"a"' } },
      { index: 0, function: { arguments: ':1}' } },
      { index: 1, id: 'up', type: 'function', function: { name: 'f' } },
    ]);
  });

  it("numbers choices from 0 in the order they first come, where the upstream numbered them otherwise", () => {
    const renderer = new ChunkRenderer(identity, false);
    const text = renderer.deltas([2, 7, 2].map((index, i) => ({ index, delta: { content: `c${i}` }, logprobs: null, finish_reason: null })));
    expect(chunks(text).map((c) => JSON.parse(c).choices[0]).map((c) => [c.index, c.delta.content])).toEqual([[0, ''], [0, 'c0'], [1, ''], [1, 'c1'], [0, 'c2']]);
  });

  it('ends with stop a choice its upstream never ended, before the usage chunk, as its whole reply would be', () => {
    const renderer = new ChunkRenderer(identity, true);
    const text = renderer.deltas([0, 1].map((index) => ({ index, delta: { content: 'hi' }, logprobs: null, finish_reason: index === 1 ? 'length' : null })));
    const end = renderer.end({ prompt_tokens: 1, completion_tokens: 2, cached_tokens: 0 });
    const last = chunks(text + end).slice(-2).map((c) => JSON.parse(c));
    expect(last[0].choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
    expect(last[1]).toMatchObject({ choices: [], usage: { completion_tokens: 2 } });
    // One that ended gets no second finish.
    expect(chunks(text + end).filter((c) => JSON.parse(c).choices[0]?.finish_reason)).toHaveLength(2);
  });

  it('writes a finishing chunk with nothing else in it exactly as JSON would', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 12 }), fc.string({ unit: 'binary' }), fc.constantFrom<ChoiceDelta['delta']>({}, { role: 'assistant' }), (index, reason, delta) => {
        const text = new ChunkRenderer(identity, true).deltas([{ index, delta, logprobs: null, finish_reason: reason }]);
        // The first choice it is given goes out as choice 0, whatever the upstream numbered it.
        const choice = { index: 0, delta: {}, logprobs: null, finish_reason: reason };
        expect(chunks(text).at(-1)).toBe(JSON.stringify({ id: identity.id, object: 'chat.completion.chunk', created: identity.created, model: identity.model, service_tier: 'default', choices: [choice], usage: null }));
      }),
      { numRuns: 300 },
    );
  });
});

describe('TextChunkRenderer', () => {
  it("numbers choices from 0 in the order they first come, where the upstream numbered them otherwise", () => {
    const renderer = new ChunkRenderer(identity, false);
    const text = renderer.deltas([2, 7, 2].map((index, i) => ({ index, delta: { content: `c${i}` }, logprobs: null, finish_reason: null })));
    expect(chunks(text).map((c) => JSON.parse(c).choices[0]).map((c) => [c.index, c.delta.content])).toEqual([[0, ''], [0, 'c0'], [1, ''], [1, 'c1'], [0, 'c2']]);
  });

  it('ends with stop a choice its upstream never ended, as the chat renderer does', () => {
    const renderer = new TextChunkRenderer({ ...identity, id: 'cmpl-1' }, false);
    const text = renderer.deltas([{ index: 0, delta: { content: 'hi' }, logprobs: null, finish_reason: null }]) + renderer.end({ prompt_tokens: 1, completion_tokens: 1, cached_tokens: 0 });
    expect(chunks(text).map((c) => JSON.parse(c).choices[0])).toEqual([
      { text: 'hi', index: 0, logprobs: null, finish_reason: null },
      { text: '', index: 0, logprobs: null, finish_reason: 'stop' },
    ]);
  });
});

describe('renderCompletion', () => {
  it('gives a tool call its upstream sent without an id the id its stream would have', () => {
    const message = { role: 'assistant' as const, content: null, tool_calls: [{ id: 'up', type: 'function', function: { name: 'f', arguments: '{}' } }, { type: 'function', function: { name: 'g', arguments: '{}' } }] };
    const body = renderCompletion(identity, { choices: [{ index: 0, message, logprobs: null, finish_reason: 'tool_calls' }], usage: { prompt_tokens: 3, completion_tokens: 1, cached_tokens: 0 } });
    expect(body.choices[0].message.tool_calls!.map((t) => t.id)).toEqual(['up', 'call_chatcmpl-1_0_1']);
  });

  it("writes OpenAI's chat.completion with no field that says nothing: Parley has no system_fingerprint, so none is sent", () => {
    const message = { role: 'assistant' as const, content: 'hi' };
    const body = renderCompletion(identity, { choices: [{ index: 0, message, logprobs: null, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, cached_tokens: 2 } });
    expect(JSON.parse(JSON.stringify(body))).toEqual({
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 7,
      model: 'm',
      service_tier: 'default',
      choices: [{ index: 0, message, logprobs: null, finish_reason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4, prompt_tokens_details: { cached_tokens: 2 } },
    });
  });
});
