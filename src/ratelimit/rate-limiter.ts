// Requests and tokens per minute per account, counted in Redis so that every
// replica draws on one budget, and every key of the account too: a member can
// make keys, so a window per key would let each new key bring the account's
// limits again. A fixed one-minute window: cheap (one hash per
// account and minute) and exact at the window's edges. Tokens are counted at
// admission as OpenAI does: the prompt plus the most the reply may take.
//
// The check runs inside the credit hold's script (billing/credit-ledger.ts),
// so a request is admitted by one script, shared with the holds of its turn,
// and a request refused for want of credit spends none of the account's budget.
// The same script bounds the account's requests in flight, where it has a
// bound: its open credit holds, counted fleet-wide.
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { LUA_INT, luaScript } from '../redis/lua-script.js';

export interface RateLimits {
  requestsPerMinute: number;
  tokensPerMinute: number;
  /** Requests in flight at once (open credit holds); 0 for no bound. */
  concurrentRequests: number;
}

const WINDOW_MS = 60_000;

/** The limits an account's requests are held to: the account's own where an operator set them, else the routing file's. */
export const limitsOf = (own: Partial<RateLimits>, defaults: RateLimits): RateLimits => ({
  requestsPerMinute: own.requestsPerMinute ?? defaults.requestsPerMinute,
  tokensPerMinute: own.tokensPerMinute ?? defaults.tokensPerMinute,
  concurrentRequests: own.concurrentRequests ?? defaults.concurrentRequests,
});

const half = (limit: number) => Math.max(1, Math.floor(limit / 2));

/**
 * How far into its account's limits a batch line may go: half of each. A
 * batch has many lines ready at once and would fill the window every minute
 * (and the account's requests in flight); the other half stays for the
 * account's own requests, from whichever key, while its batch runs.
 */
export const batchLineLimits = (limits: RateLimits): RateLimits => ({
  requestsPerMinute: half(limits.requestsPerMinute),
  tokensPerMinute: half(limits.tokensPerMinute),
  concurrentRequests: limits.concurrentRequests === 0 ? 0 : half(limits.concurrentRequests),
});

/** What a refusal's code (1, 2 or 3 from the Lua below) says the request was over. */
export type RateRefusal = 'requests' | 'tokens' | 'in_flight';
export const RATE_REFUSALS: Record<number, RateRefusal> = { 1: 'requests', 2: 'tokens', 3: 'in_flight' };

/** One request's place in its account's budget: the window's key and what the script is given. */
export interface RateCheck {
  key: string;
  /** Requests limit, tokens limit, tokens of this request, requests in flight limit (0: none). */
  args: [number, number, number, number];
  limits: RateLimits;
  now: number;
}

export function rateCheck(account: string, limits: RateLimits, tokens: number, now = Date.now()): RateCheck {
  const minute = Math.floor(now / WINDOW_MS);
  return { key: redisKeys.rateWindow(account, minute), args: [limits.requestsPerMinute, limits.tokensPerMinute, tokens, limits.concurrentRequests], limits, now };
}

/**
 * Lua for a script that admits requests (it needs LUA_INT). Each window a
 * script touches is read once (`rate_window(key)`) and its new counts are
 * written once, by `write_rate_windows()` at the script's end; in between,
 * `rate_refusal` says whether one more request fits (0, or 1 over the
 * requests limit, 2 over the tokens limit) and `count_request` counts it;
 * `in_flight_refusal` says 3 where `open` requests are the limit's.
 * A script runs alone, so the counts it read are still the window's when it
 * writes: one HSET of both, a call fewer than an HINCRBY each.
 */
export const RATE_LIMIT_LUA = `
local rate_windows, rate_windows_read = {}, {}
local function rate_window(key)
  local w = rate_windows[key]
  if not w then
    local counts = redis.call('HMGET', key, 'requests', 'tokens')
    w = { key = key, requests = tonumber(counts[1] or '0'), tokens = tonumber(counts[2] or '0'), added_requests = 0 }
    rate_windows[key] = w
    rate_windows_read[#rate_windows_read + 1] = w
  end
  return w
end
local function rate_refusal(w, requests_limit, tokens_limit, tokens)
  if w.requests + 1 > requests_limit then return 1 end
  if w.tokens + tokens > tokens_limit then return 2 end
  return 0
end
local function in_flight_refusal(open, limit)
  if open >= limit then return 3 end
  return 0
end
local function count_request(w, tokens)
  w.requests, w.tokens = w.requests + 1, w.tokens + tokens
  w.added_requests = w.added_requests + 1
end
local function write_rate_windows()
  for _, w in ipairs(rate_windows_read) do
    if w.added_requests > 0 then
      redis.call('HSET', w.key, 'requests', int(w.requests), 'tokens', int(w.tokens))
      -- The window's first requests set when it goes.
      if w.requests == w.added_requests then redis.call('PEXPIRE', w.key, ${WINDOW_MS + 5000}) end
    end
  end
end
`;

/** Where a key stands in its window after a request was counted (or refused): plain figures, for the gateway's headers and 429s. */
export interface RateUse {
  limits: RateLimits;
  requests: number;
  tokens: number;
  /** Seconds until the window ends. */
  resetSeconds: number;
}

export function rateUse(check: RateCheck, requests: number, tokens: number): RateUse {
  const resetSeconds = Math.max(1, Math.ceil((Math.floor(check.now / WINDOW_MS + 1) * WINDOW_MS - check.now) / 1000));
  return { limits: check.limits, requests, tokens, resetSeconds };
}

// Counts one request that holds no credit (count_tokens) in its key's
// window, tokens aside. KEYS: the window. ARGV: requests limit. Replies 1
// when the window was full (nothing counted), else 0, and the window's counts.
const COUNT_REQUEST = luaScript(`
${LUA_INT}
${RATE_LIMIT_LUA}
local w = rate_window(KEYS[1])
if w.requests + 1 > tonumber(ARGV[1]) then return {1, w.requests, w.tokens} end
count_request(w, 0)
write_rate_windows()
return {0, w.requests, w.tokens}
`);

/** Counts a request that holds no credit against its key's request rate: where the key stands, and whether the window was full. */
export async function countRequest(redis: Redis, check: RateCheck): Promise<{ full: boolean; use: RateUse }> {
  const [full, requests, tokens] = (await COUNT_REQUEST.run(redis, [check.key], [check.args[0]])) as number[];
  return { full: full === 1, use: rateUse(check, requests, tokens) };
}
