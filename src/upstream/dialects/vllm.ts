// vLLM reports cached prompt tokens in OpenAI's field when it is started with
// --enable-prompt-tokens-details; usage may come on every chunk, and the last one wins.
import { openAiCompatible } from '../dialect.js';
import { rootMetrics } from '../engine-load.js';

export const vllm = openAiCompatible({
  // POST /tokenize at the server's root counts a chat prompt through the model's template.
  promptCount: {
    url: (base) => `${base.replace(/\/v1$/, '')}/tokenize`,
    body: (messages, model) => ({ model, messages }),
    read: (answer) => answer.count,
  },
  // Its scheduler's gauges at /metrics (vllm/v1/metrics/loggers.py); the KV gauge was gpu_cache_usage_perc before 0.10.
  engineLoad: {
    url: rootMetrics,
    running: 'vllm:num_requests_running',
    waiting: 'vllm:num_requests_waiting',
    kvCacheUse: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
    // The time each request spent running (prefill and decode), its queueing not counted.
    runTime: 'vllm:request_inference_time_seconds',
  },
  // `cache_salt` (since 0.9) starts the hash chain of a request's cached blocks: requests with different salts share none.
  saltsPrefixCache: true,
  // With --scheduling-policy priority, lower values are scheduled first (0 when not given); the endpoint opts in.
  priorityOf: (tier) => ({ priority: -1, default: 0, flex: 1 })[tier],
  // The stop string that ended a choice (a token id when a stop token did).
  matchedStop: (choice) => choice.stop_reason,
  // Newer releases name reasoning `reasoning`, older ones `reasoning_content`.
  reasoning: (message) => message.reasoning ?? message.reasoning_content,
  // Its error body, streamed too, is `{"object": "error", "message": ...}`.
  isErrorEvent: (body) => body.object === 'error',
  // `user` is logged; `reasoning_effort` steers gpt-oss models.
  understands: ['user', 'reasoning_effort'],
  // Since 0.10.2: stop_reason and token_ids null on every choice, prompt_token_ids null on the first chunk.
  chunkFraming: { choiceTail: ['stop_reason', 'token_ids'], tailNull: ['prompt_token_ids', 'usage'] },
  extraBody: (req) => (req.stream ? { stream_options: { include_usage: true, continuous_usage_stats: false } } : {}),
});
