// llama.cpp's llama-server: one choice per call, cached tokens in OpenAI's
// field on recent builds and in `timings.cache_n` on older ones, context
// errors typed `exceed_context_size_error`, stream errors on an `error:` line.
// It answers a body its JSON library cannot read (text that is not valid
// UTF-8 or Unicode, for one) with a 500 that names the library's exception:
// that is the request's fault, not the server's.
import { openAiCachedTokens, openAiCompatible } from '../dialect.js';

export const llamacpp = openAiCompatible({
  multipleChoices: false,
  requestFaultMessage: /\[json\.exception\.|invalid string: |invalid UTF-8 byte/,
  cachedTokens: (usage, whole) => openAiCachedTokens(usage) ?? whole.timings?.cache_n,
});
