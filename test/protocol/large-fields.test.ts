// A request's parse stops at its first problem, token ids are checked in one
// pass, and a logit_bias is counted before its entries are checked. Every item
// of an array was checked and made its issue, so 2 million numbers as
// `messages` held the main thread 5 to 7 s (for a request refused and free to
// its sender), and as `tool_calls` made zod throw: a 500. A union of array
// shapes checked every item against each shape it tried (an embeddings input
// of a million one-letter strings: 2.6 s), and a logit_bias of 300,000 keys
// took its record's checks 0.8 s. Timed as parses alone, in this process: each
// bound is many times the figure.
import { describe, expect, it } from 'vitest';
import { MAX_STOP_SEQUENCES, parseChatCompletionRequest } from '../../src/protocol/chat-request.js';
import { MAX_PROMPTS, parseCompletionRequest } from '../../src/protocol/completions.js';
import { parseEmbeddingsRequest } from '../../src/protocol/embeddings.js';
import { ApiError } from '../../src/protocol/errors.js';
import { parseMessagesRequest } from '../../src/protocol/messages-request.js';
import { parseResponsesRequest } from '../../src/protocol/responses-request.js';

/** What `parse` made of `body`, and the ms it took. */
function timed<T>(parse: (body: unknown) => T, body: unknown): { parsed: T; ms: number } {
  const started = performance.now();
  const parsed = parse(body);
  return { parsed, ms: performance.now() - started };
}

const letters = Array.from({ length: 1_000_000 }, () => 'a');
const ids = (count: number) => Array.from({ length: count }, (_, i) => i % 50_000);

describe('an array of many items that are not what its field holds', () => {
  const numbers = Array.from({ length: 2_000_000 }, () => 1);
  const hi = [{ role: 'user', content: 'hi' }];
  const cases: [string, (body: unknown) => unknown, unknown, string][] = [
    ['chat messages', parseChatCompletionRequest, { model: 'm', messages: numbers }, 'messages[0]'],
    ['chat content', parseChatCompletionRequest, { model: 'm', messages: [{ role: 'user', content: numbers }] }, 'messages[0].content'],
    ['chat tool_calls', parseChatCompletionRequest, { model: 'm', messages: [{ role: 'assistant', content: 'x', tool_calls: numbers }] }, 'messages[0].tool_calls[0]'],
    ['chat tools', parseChatCompletionRequest, { model: 'm', messages: hi, tools: numbers }, 'tools[0]'],
    ['Messages messages', parseMessagesRequest, { model: 'm', max_tokens: 1, messages: numbers }, 'messages[0]'],
    ['Messages content', parseMessagesRequest, { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: numbers }] }, 'messages[0].content'],
    ['Messages tools', parseMessagesRequest, { model: 'm', max_tokens: 1, messages: hi, tools: numbers }, 'tools[0]'],
    ['Responses input', parseResponsesRequest, { model: 'm', input: numbers }, 'input'],
    ['Responses tools', parseResponsesRequest, { model: 'm', input: 'hi', tools: numbers }, 'tools[0]'],
  ];

  it.each(cases)('is refused at its first, a 400 (%s)', (_, parse, body, param) => {
    const { parsed, ms } = timed(parse, body);
    expect(parsed).toMatchObject({ status: 400, param });
    // 5 to 8 s each, every item checked (and zod threw on tool_calls).
    expect(ms).toBeLessThan(400);
  });
});

describe('a field of many items', () => {
  it('of strings, past the most inputs or prompts, is refused at once, in embeddings and completions alike', () => {
    const embeddings = timed(parseEmbeddingsRequest, { model: 'm', input: letters });
    expect(embeddings.parsed).toBeInstanceOf(ApiError);
    expect(embeddings.parsed).toMatchObject({ status: 400, param: 'input', message: expect.stringContaining('at most 2048 non-empty strings') });
    const completions = timed(parseCompletionRequest, { model: 'm', prompt: letters });
    expect(completions.parsed).toMatchObject({ status: 400, param: 'prompt', message: expect.stringContaining(`at most ${MAX_PROMPTS} prompts`) });
    // 2.6 and 2.7 s, each, before the count came first.
    expect(embeddings.ms + completions.ms).toBeLessThan(250);
  });

  it('of token ids is checked in one pass, and the shapes clients send are taken', () => {
    const many = timed(parseEmbeddingsRequest, { model: 'm', input: ids(2_000_000) });
    expect(many.parsed).not.toBeInstanceOf(ApiError);
    // 190 to 250 ms checked id by id.
    expect(many.ms).toBeLessThan(100);
    expect(parseEmbeddingsRequest({ model: 'm', input: ['a', 'b'] })).toMatchObject({ input: ['a', 'b'] });
    expect(parseEmbeddingsRequest({ model: 'm', input: [[1, 2], [3]] })).toMatchObject({ input: [[1, 2], [3]] });
    expect(parseEmbeddingsRequest({ model: 'm', input: Array.from({ length: 2048 }, () => 'a') })).not.toBeInstanceOf(ApiError);
    expect(parseCompletionRequest({ model: 'm', prompt: [1, 2, 3] })).toMatchObject({ prompt: [1, 2, 3] });
    expect(parseCompletionRequest({ model: 'm', prompt: [[1], [2, 3]] })).toMatchObject({ prompt: [[1], [2, 3]] });
    for (const input of [[], [1.5], [-1], [[1], 'a'], [[]]]) expect(parseEmbeddingsRequest({ model: 'm', input })).toMatchObject({ status: 400, param: 'input' });
  });

  it('of logit_bias past 1,024 token ids is refused before its entries are checked', () => {
    const bias = (count: number) => Object.fromEntries(Array.from({ length: count }, (_, i) => [String(i), -100]));
    const huge = bias(300_000);
    const refused = timed(parseChatCompletionRequest, { model: 'm', messages: [{ role: 'user', content: 'hi' }], logit_bias: huge });
    expect(refused.parsed).toMatchObject({ status: 400, param: 'logit_bias', message: expect.stringContaining('at most 1024 token ids') });
    // 0.6 to 0.8 s, its entries checked.
    expect(refused.ms).toBeLessThan(150);
    expect(parseCompletionRequest({ model: 'm', prompt: 'x', logit_bias: huge })).toMatchObject({ status: 400, param: 'logit_bias' });
    expect(parseChatCompletionRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], logit_bias: bias(1024) })).toMatchObject({ logit_bias: bias(1024) });
    expect(parseChatCompletionRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], logit_bias: { x: 1 } })).toMatchObject({ status: 400, param: 'logit_bias.x' });
  });
});

describe('the stop strings an engine looks for', () => {
  it(`are at most ${MAX_STOP_SEQUENCES} on a Messages request, and each at most 1,024 characters in every API`, () => {
    const hi = [{ role: 'user', content: 'hi' }];
    const sequences = (count: number, chars = 3) => Array.from({ length: count }, (_, i) => `${i}`.padEnd(chars, '#'));
    expect(parseMessagesRequest({ model: 'm', max_tokens: 1, messages: hi, stop_sequences: sequences(MAX_STOP_SEQUENCES) })).not.toBeInstanceOf(ApiError);
    expect(parseMessagesRequest({ model: 'm', max_tokens: 1, messages: hi, stop_sequences: sequences(MAX_STOP_SEQUENCES + 1) })).toMatchObject({ status: 400, param: 'stop_sequences' });
    expect(parseMessagesRequest({ model: 'm', max_tokens: 1, messages: hi, stop_sequences: sequences(1, 1025) })).toMatchObject({ status: 400, param: 'stop_sequences[0]' });
    expect(parseChatCompletionRequest({ model: 'm', messages: hi, stop: sequences(4, 1024) })).not.toBeInstanceOf(ApiError);
    expect(parseChatCompletionRequest({ model: 'm', messages: hi, stop: 'x'.repeat(1025) })).toMatchObject({ status: 400, param: 'stop' });
    expect(parseCompletionRequest({ model: 'm', prompt: 'x', stop: sequences(2, 1025) })).toMatchObject({ status: 400, param: 'stop[0]' });
  });
});
