// The replies of the fast scripted upstream (fast-upstream.mjs), as the
// bytes it sends: 256 tokens, whole or as 256 content chunks between an
// opening chunk with the role, a closing one with the finish reason, the
// usage chunk and [DONE].
//
// Framed as current vLLM frames them, since what a pass-through forwards and
// what Parley reads are those bytes: an id of `chatcmpl-` and 32 hex digits,
// the time in seconds, and the fields vLLM sets to null: token_ids on every
// choice (since 0.10.2), prompt_token_ids on the first chunk, stop_reason on
// the finishing one.
export const TOKENS = 256;

const ID = 'chatcmpl-f42e8ae7ddb346e1adfba47e3d710b46';
const CREATED = 1_795_509_253;
const usage = { prompt_tokens: 24, total_tokens: 24 + TOKENS, completion_tokens: TOKENS, prompt_tokens_details: { cached_tokens: 16 } };

export const WHOLE_REPLY = JSON.stringify({
  id: ID, object: 'chat.completion', created: CREATED, model: 'bench',
  choices: [{ index: 0, message: { role: 'assistant', content: ' tok'.repeat(TOKENS) }, logprobs: null, finish_reason: 'length', stop_reason: null, token_ids: null }],
  usage,
  prompt_token_ids: null,
});

const chunk = (choices, extra = {}) => `data: ${JSON.stringify({ id: ID, object: 'chat.completion.chunk', created: CREATED, model: 'bench', choices, ...extra })}\n\n`;

export const STREAMED_REPLY =
  chunk([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], { prompt_token_ids: null }) +
  Array.from({ length: TOKENS }, () => chunk([{ index: 0, delta: { content: ' tok' }, logprobs: null, finish_reason: null, token_ids: null }])).join('') +
  chunk([{ index: 0, delta: { content: '' }, logprobs: null, finish_reason: 'length', stop_reason: null, token_ids: null }]) +
  chunk([], { usage }) +
  'data: [DONE]\n\n';

/** Inputs per embeddings request, and the size of each vector. */
export const EMBEDDING_INPUTS = 16;
const DIMENSIONS = 1024;

/** An embeddings reply for EMBEDDING_INPUTS inputs, as vLLM writes one for `encoding_format: base64` (what the openai clients ask for). */
export const EMBEDDINGS_REPLY = JSON.stringify({
  id: 'embd-5c1f0a9e2b7d4c8e9f1a2b3c4d5e6f70', object: 'list', created: CREATED, model: 'bench',
  data: Array.from({ length: EMBEDDING_INPUTS }, (_, index) => ({
    index, object: 'embedding',
    embedding: Buffer.from(new Float32Array(Array.from({ length: DIMENSIONS }, (_, i) => Math.sin(index + i))).buffer).toString('base64'),
  })),
  usage: { prompt_tokens: 8 * EMBEDDING_INPUTS, total_tokens: 8 * EMBEDDING_INPUTS, completion_tokens: 0, prompt_tokens_details: null },
});
