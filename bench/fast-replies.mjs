// The replies of the fast scripted upstream (fast-upstream.mjs), as the
// bytes it sends: 256 tokens, whole or as 256 content chunks between an
// opening chunk with the role, a closing one with the finish reason, the
// usage chunk and [DONE].
export const TOKENS = 256;

const usage = { prompt_tokens: 24, completion_tokens: TOKENS, total_tokens: 24 + TOKENS, prompt_tokens_details: { cached_tokens: 16 } };

export const WHOLE_REPLY = JSON.stringify({
  id: 'up', object: 'chat.completion', created: 1, model: 'bench',
  choices: [{ index: 0, message: { role: 'assistant', content: ' tok'.repeat(TOKENS) }, finish_reason: 'length' }],
  usage,
});

const chunk = (choices, extra = {}) => `data: ${JSON.stringify({ id: 'up', object: 'chat.completion.chunk', created: 1, model: 'bench', choices, ...extra })}\n\n`;

export const STREAMED_REPLY =
  chunk([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]) +
  Array.from({ length: TOKENS }, () => chunk([{ index: 0, delta: { content: ' tok' }, logprobs: null, finish_reason: null }])).join('') +
  chunk([{ index: 0, delta: {}, finish_reason: 'length' }]) +
  chunk([], { usage }) +
  'data: [DONE]\n\n';
