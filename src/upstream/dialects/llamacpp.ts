// llama.cpp's llama-server: one choice per call, cached tokens in OpenAI's
// field on recent builds and in `timings.cache_n` on older ones, context
// errors typed `exceed_context_size_error`, stream errors on an `error:` line.
import { openAiCachedTokens, openAiCompatible } from '../dialect.js';

export const llamacpp = openAiCompatible({
  multipleChoices: false,
  cachedTokens: (usage, whole) => openAiCachedTokens(usage) ?? whole.timings?.cache_n,
});
