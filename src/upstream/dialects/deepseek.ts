// DeepSeek splits the prompt into prompt_cache_hit_tokens and
// prompt_cache_miss_tokens, and returns one choice per call.
import { openAiCompatible } from '../dialect.js';

export const deepseek = openAiCompatible({
  multipleChoices: false,
  chunkFraming: { head: ['system_fingerprint'] },
  cachedTokens: (usage) => usage.prompt_cache_hit_tokens,
});
