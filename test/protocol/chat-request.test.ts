import { describe, expect, it } from 'vitest';
import { parseChatCompletionRequest } from '../../src/protocol/chat-request.js';
import { ApiError } from '../../src/protocol/errors.js';

const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

function rejected(body: unknown) {
  const r = parseChatCompletionRequest(body);
  expect(r).toBeInstanceOf(ApiError);
  return (r as ApiError).toBody().error;
}

describe('the chat completion request', () => {
  it('accepts every role of the spec, and content as text parts', () => {
    const r = parseChatCompletionRequest({
      ...base,
      messages: [
        { role: 'system', content: 's' },
        { role: 'developer', content: 'd' },
        { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
        { role: 'assistant', content: 'x' },
      ],
    });
    expect(r).not.toBeInstanceOf(ApiError);
  });

  it('drops unknown fields instead of failing', () => {
    const r = parseChatCompletionRequest({ ...base, top_k: 5, future: { a: 1 } });
    expect(r).toEqual(base);
  });

  it("takes every field of OpenAI's current reference", () => {
    const full = {
      ...base, user: 'end-user-7', safety_identifier: 'hash-7', reasoning_effort: 'low', verbosity: 'medium', metadata: { team: 'search' },
      service_tier: 'flex', store: false, prediction: { type: 'content', content: 'draft' }, modalities: ['text'],
      audio: { voice: 'alloy', format: 'mp3' }, web_search_options: { search_context_size: 'low' }, prompt_cache_key: 'tenant-7',
      prompt_cache_retention: '24h', stream_options: { include_usage: true, include_obfuscation: false },
    };
    expect(parseChatCompletionRequest(full)).toEqual(full);
  });

  const cases: [string, Record<string, unknown>, string][] = [
    ['a reasoning effort OpenAI has not', { reasoning_effort: 'extreme' }, 'reasoning_effort'],
    ['metadata that is not text', { metadata: { a: 1 } }, 'metadata.a'],
    ['more than 16 metadata pairs', { metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata'],
    ['a service tier OpenAI has not', { service_tier: 'fast' }, 'service_tier'],
    ['a user that is not text', { user: 7 }, 'user'],
    ['n over 4', { n: 5 }, 'n'],
    ['n of 0', { n: 0 }, 'n'],
    ['temperature over 2', { temperature: 2.5 }, 'temperature'],
    ['top_p over 1', { top_p: 1.1 }, 'top_p'],
    ['top_logprobs over 20', { logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['top_logprobs without logprobs', { top_logprobs: 2 }, 'top_logprobs'],
    ['presence_penalty under -2', { presence_penalty: -3 }, 'presence_penalty'],
    ['frequency_penalty over 2', { frequency_penalty: 3 }, 'frequency_penalty'],
    ['logit_bias value over 100', { logit_bias: { '42': 101 } }, 'logit_bias.42'],
    ['more than 4 stop strings', { stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    ['an unknown role', { messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
    ['empty messages', { messages: [] }, 'messages'],
    ['stream not a boolean', { stream: 'yes' }, 'stream'],
    ['max_tokens not an integer', { max_tokens: 1.5 }, 'max_tokens'],
  ];
  it.each(cases)('refuses %s with param naming it', (_name, patch, param) => {
    const e = rejected({ ...base, ...patch });
    expect(e.type).toBe('invalid_request_error');
    expect(e.param).toBe(param);
    expect(e.message).toContain(param.split(/[.[]/)[0]);
  });

  // Each is a union of accepted forms, whose own failure would say only "Invalid input".
  const unions: [string, Record<string, unknown>, string, string][] = [
    ['null content', { messages: [{ role: 'user', content: null }] }, 'messages[0].content', 'expected a string, or a non-empty array of text parts'],
    ['an image part', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content', 'take text only'],
    ['five stop strings', { stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop', 'an array of at most 4 strings'],
    ['an unknown tool_choice', { tool_choice: 'always' }, 'tool_choice', '"none", "auto", "required"'],
  ];
  it.each(unions)('says what is accepted when it refuses %s', (_name, patch, param, says) => {
    const e = rejected({ ...base, ...patch });
    expect(e.param).toBe(param);
    expect(e.message).toContain(says);
  });

  it('says which required parameter is missing', () => {
    const e = rejected({ messages: base.messages });
    expect(e.param).toBe('model');
    expect(e.message).toBe("Missing required parameter: 'model'.");
  });

  it('refuses a body that is not an object, naming no parameter (null, as OpenAI does)', () => {
    for (const body of [[1, 2], null, 'text', 3]) {
      const e = rejected(body);
      expect(e.type).toBe('invalid_request_error');
      expect(e.param).toBeNull();
    }
  });
});
