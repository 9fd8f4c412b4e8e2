// How an account's standing in its rate-limit window reaches the client: OpenAI's
// `x-ratelimit-*` headers on every reply, and the 429 when it is spent.
import { rateLimitExceeded, tooManyInFlight, type ApiError } from '../protocol/errors.js';
import type { RateRefusal, RateUse } from '../ratelimit/rate-limiter.js';

export function rateLimitHeaders(use: RateUse | undefined): Record<string, string> {
  if (!use) return {};
  const { limits, requests, tokens, resetSeconds } = use;
  const reset = `${resetSeconds}s`;
  return {
    'x-ratelimit-limit-requests': String(limits.requestsPerMinute),
    'x-ratelimit-remaining-requests': String(Math.max(0, limits.requestsPerMinute - requests)),
    'x-ratelimit-reset-requests': reset,
    'x-ratelimit-limit-tokens': String(limits.tokensPerMinute),
    'x-ratelimit-remaining-tokens': String(Math.max(0, limits.tokensPerMinute - tokens)),
    'x-ratelimit-reset-tokens': reset,
  };
}

export function rateLimitRefusal(over: RateRefusal, use: RateUse): ApiError {
  if (over === 'in_flight') return tooManyInFlight(use.limits.concurrentRequests, rateLimitHeaders(use));
  const limit = over === 'requests' ? use.limits.requestsPerMinute : use.limits.tokensPerMinute;
  return rateLimitExceeded(over, limit, use.resetSeconds, rateLimitHeaders(use));
}
