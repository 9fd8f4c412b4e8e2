// vLLM reports cached prompt tokens in OpenAI's field when it is started with
// --enable-prompt-tokens-details; usage may come on every chunk, and the last one wins.
import { openAiCachedTokens, openAiCompatible } from '../dialect.js';

export const vllm = openAiCompatible({
  cachedTokens: openAiCachedTokens,
  extraBody: (req) => (req.stream ? { stream_options: { include_usage: true, continuous_usage_stats: false } } : {}),
});
