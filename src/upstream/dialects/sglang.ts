// SGLang reports cached prompt tokens in OpenAI's field when started with
// --enable-cache-report, and otherwise not at all.
import { openAiCompatible } from '../dialect.js';
import { rootMetrics } from '../engine-load.js';

export const sglang = openAiCompatible({
  // With --enable-metrics, its scheduler's gauges at /metrics (srt/metrics/collector.py): token_usage is the KV pool's used share.
  engineLoad: { url: rootMetrics, running: 'sglang:num_running_reqs', waiting: 'sglang:num_queue_reqs', kvCacheUse: ['sglang:token_usage'] },
  matchedStop: (choice) => choice.matched_stop,
  // `cache_salt` on chat and completions requests keeps their radix-cache entries apart from other salts'.
  saltsPrefixCache: true,
  understands: ['user', 'reasoning_effort'],
  // Its error bodies are `{"object": "error", "message": ...}`.
  isErrorEvent: (body) => body.object === 'error',
  // matched_stop null on every choice, and a null usage. Older releases write every field of the delta, null or not: those take the full parse.
  chunkFraming: { choiceTail: ['matched_stop'], tailNull: ['usage'] },
});
