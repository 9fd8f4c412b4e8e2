// Requests and tokens per minute per API key, counted in Redis so that every
// replica draws on one budget. A fixed one-minute window: cheap (one script,
// one hash per key and minute) and exact at the window's edges. Tokens are
// counted at admission as OpenAI does: the prompt plus the most the reply
// may take.
import type { Redis } from 'ioredis';
import { rateLimitExceeded } from '../protocol/errors.js';
import { redisKeys } from '../redis/keys.js';
import { luaScript } from '../redis/lua-script.js';

export interface RateLimits {
  requestsPerMinute: number;
  tokensPerMinute: number;
}

const WINDOW_MS = 60_000;

// ARGV: requests limit, tokens limit, tokens of this request, window length ms.
const ADMIT = luaScript(`
local requests = tonumber(redis.call('HGET', KEYS[1], 'requests') or '0')
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0')
local cost = tonumber(ARGV[3])
if requests + 1 > tonumber(ARGV[1]) then return {0, 1, requests, tokens} end
if tokens + cost > tonumber(ARGV[2]) then return {0, 2, requests, tokens} end
redis.call('HINCRBY', KEYS[1], 'requests', 1)
redis.call('HINCRBY', KEYS[1], 'tokens', cost)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + 5000)
return {1, 0, requests + 1, tokens + cost}
`);

/**
 * Counts one request of `tokens` against the key's budget. Returns OpenAI's
 * `x-ratelimit-*` headers for the reply; throws a 429 carrying them when
 * either budget is spent.
 */
export async function admitRequest(redis: Redis, keyId: string, limits: RateLimits, tokens: number): Promise<Record<string, string>> {
  const now = Date.now();
  const minute = Math.floor(now / WINDOW_MS);
  const [admitted, exceeded, requests, used] = (await ADMIT.run(redis, [redisKeys.rateWindow(keyId, minute)], [
    limits.requestsPerMinute,
    limits.tokensPerMinute,
    tokens,
    WINDOW_MS,
  ])) as number[];
  const resetSeconds = Math.max(1, Math.ceil(((minute + 1) * WINDOW_MS - now) / 1000));
  const headers = {
    'x-ratelimit-limit-requests': String(limits.requestsPerMinute),
    'x-ratelimit-remaining-requests': String(Math.max(0, limits.requestsPerMinute - requests)),
    'x-ratelimit-reset-requests': `${resetSeconds}s`,
    'x-ratelimit-limit-tokens': String(limits.tokensPerMinute),
    'x-ratelimit-remaining-tokens': String(Math.max(0, limits.tokensPerMinute - used)),
    'x-ratelimit-reset-tokens': `${resetSeconds}s`,
  };
  if (!admitted) {
    const [what, limit] = exceeded === 1 ? (['requests', limits.requestsPerMinute] as const) : (['tokens', limits.tokensPerMinute] as const);
    throw rateLimitExceeded(what, limit, resetSeconds, headers);
  }
  return headers;
}
