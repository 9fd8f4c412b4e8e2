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
