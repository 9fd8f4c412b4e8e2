// Requests and tokens per minute per API key, counted in Redis so that every
// replica draws on one budget. A fixed one-minute window: cheap (one hash per
// key and minute) and exact at the window's edges. Tokens are counted at
// admission as OpenAI does: the prompt plus the most the reply may take.
//
// The check runs inside the credit hold's script (billing/credit-ledger.ts),
// so a request is admitted in one round trip to Redis, and a request refused
// for want of credit spends none of the key's budget.
import { rateLimitExceeded } from '../protocol/errors.js';
import { redisKeys } from '../redis/keys.js';

export interface RateLimits {
  requestsPerMinute: number;
  tokensPerMinute: number;
}

const WINDOW_MS = 60_000;

/** One request's place in its key's budget: the window's key and what the script is given. */
export interface RateCheck {
  key: string;
  /** Requests limit, tokens limit, tokens of this request. */
  args: [number, number, number];
  limits: RateLimits;
  now: number;
}

export function rateCheck(keyId: string, limits: RateLimits, tokens: number, now = Date.now()): RateCheck {
  const minute = Math.floor(now / WINDOW_MS);
  return { key: redisKeys.rateWindow(keyId, minute), args: [limits.requestsPerMinute, limits.tokensPerMinute, tokens], limits, now };
}

/**
 * Lua for a script that has the window's key in KEYS[4] (or no fourth key:
 * no rate limit) and the check's args in ARGV[6..8]. It sets `rate_refused`
 * (0, or 1 for requests, 2 for tokens) and the window's counts, and defines
 * `count_request()` for the script to call once it admits the request.
 */
export const RATE_LIMIT_LUA = `
local rate_refused, rate_requests, rate_tokens = 0, 0, 0
if KEYS[4] then
  local counts = redis.call('HMGET', KEYS[4], 'requests', 'tokens')
  rate_requests, rate_tokens = tonumber(counts[1] or '0'), tonumber(counts[2] or '0')
  if rate_requests + 1 > tonumber(ARGV[6]) then rate_refused = 1
  elseif rate_tokens + tonumber(ARGV[8]) > tonumber(ARGV[7]) then rate_refused = 2 end
end
local function count_request()
  if not KEYS[4] then return end
  rate_requests = redis.call('HINCRBY', KEYS[4], 'requests', 1)
  rate_tokens = redis.call('HINCRBY', KEYS[4], 'tokens', ARGV[8])
  -- The window's first request sets when it goes.
  if rate_requests == 1 then redis.call('PEXPIRE', KEYS[4], ${WINDOW_MS + 5000}) end
end
`;

/**
 * OpenAI's `x-ratelimit-*` headers from the window's counts. Throws the 429
 * carrying them when the script refused the request.
 */
export function rateLimitHeaders(check: RateCheck, refused: number, requests: number, tokensUsed: number): Record<string, string> {
  const { limits, now } = check;
  const resetSeconds = Math.max(1, Math.ceil((Math.floor(now / WINDOW_MS + 1) * WINDOW_MS - now) / 1000));
  const headers = {
    'x-ratelimit-limit-requests': String(limits.requestsPerMinute),
    'x-ratelimit-remaining-requests': String(Math.max(0, limits.requestsPerMinute - requests)),
    'x-ratelimit-reset-requests': `${resetSeconds}s`,
    'x-ratelimit-limit-tokens': String(limits.tokensPerMinute),
    'x-ratelimit-remaining-tokens': String(Math.max(0, limits.tokensPerMinute - tokensUsed)),
    'x-ratelimit-reset-tokens': `${resetSeconds}s`,
  };
  if (refused) {
    const [what, limit] = refused === 1 ? (['requests', limits.requestsPerMinute] as const) : (['tokens', limits.tokensPerMinute] as const);
    throw rateLimitExceeded(what, limit, resetSeconds, headers);
  }
  return headers;
}
