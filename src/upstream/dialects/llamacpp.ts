// llama.cpp's llama-server: one choice per call, cached tokens in OpenAI's
// field on recent builds, in `timings.cache_n` on older ones, and on the
// oldest only as what `timings.prompt_n` (the tokens it evaluated) leaves
// of the prompt. Its chunks put `choices` first, so they take the full parse.
import { openAiCompatible } from '../dialect.js';
import { openAiCachedTokens } from '../openai-replies.js';
import { rootMetrics, type EngineLoadSource } from '../engine-load.js';

/**
 * With --metrics, llama-server's slots busy and requests deferred (no slot free) at /metrics; its KV-use gauge
 * was taken out in 2025. Parley's own engine serves the same two gauges.
 */
export const LLAMACPP_LOAD: EngineLoadSource = { url: rootMetrics, running: 'llamacpp:requests_processing', waiting: 'llamacpp:requests_deferred' };

const promptNotEvaluated = (usage: { prompt_tokens?: unknown }, timings: { prompt_n?: unknown } | undefined) =>
  typeof usage.prompt_tokens === 'number' && typeof timings?.prompt_n === 'number' ? usage.prompt_tokens - timings.prompt_n : undefined;

export const llamacpp = openAiCompatible({
  multipleChoices: false,
  engineLoad: LLAMACPP_LOAD,
  cachedTokens: (usage, whole) => openAiCachedTokens(usage) ?? whole.timings?.cache_n ?? promptNotEvaluated(usage, whole.timings),
  // A prompt past the context is typed so, whatever its message says.
  isContextError: (error) => error.type === 'exceed_context_size_error',
  // A failure mid-stream comes on an `error:` line rather than an error event.
  errorField: 'error',
  // A body its JSON library cannot read (text that is not valid UTF-8 or Unicode, for one) gets a 500 that names
  // the library's exception: that is the request's fault, not the server's.
  requestFaultMessage: /\[json\.exception\.|invalid string: |invalid UTF-8 byte/,
});
