// Prepaid credit in Redis, one atomic script per change of money.
//
// An account holds `granted` (operator grants, used first) and `topped_up`
// (paid or redeemed) credit, and `held`: the sum of its open holds. Each hold
// carries an expiry that the replica serving the request keeps pushing
// forward; a replica that dies stops doing so, and the next script to touch
// the account reclaims its holds. Available = granted + topped_up - held.
//
// A hold's entry in the account's hold amounts is its settlement's ticket:
// settling takes it away, so a settlement retried after a lost reply finds
// none and changes nothing. A reclaimed hold's entry stays, marked, for as
// long as its settlement may still come (RECLAIMED_KEPT_MS), so that a reply
// that outlived its hold is still charged, once. Nothing is written per
// request beyond the hold itself and its usage event.
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { BatchKeys, LUA_EACH_ITEM } from '../redis/batch-keys.js';
import { LUA_INT, LUA_NOW_MS, luaArgs, luaConstants, luaJson, luaScript } from '../redis/lua-script.js';
import { RATE_LIMIT_LUA, RATE_REFUSALS, rateUse, type RateCheck, type RateRefusal, type RateUse } from '../ratelimit/rate-limiter.js';
import type { Usage } from '../protocol/chat-response.js';
import { MAX_BALANCE_MICROS, type TokenPrices } from './prices.js';
import type { ServiceTier } from '../protocol/service-tier.js';

/** How long a reclaimed hold is remembered: longer than a settlement is retried, however long Redis was away. */
const RECLAIMED_KEPT_MS = 2 * 86_400_000;

/**
 * How long the daily usage totals are kept, an account's and each of its
 * keys'. Each day's hash holds `<model>\t<api>\t<tier>\t<metric>` → total,
 * for the metrics requests, prompt_tokens, cached_tokens, completion_tokens
 * and cost (of complete replies): fields bounded by the routing file, not by
 * the requests. An account's day written before the groups has
 * `<model>\t<metric>`.
 */
export const DAILY_TOTALS_KEPT_DAYS = 400;

// Defines reclaim(account, holds, amounts, reclaimed, budgets), which
// releases the account's holds whose replica stopped extending them (every
// script that reads a balance calls it first), marking each 'reclaimed' in
// the amounts and filing it by when in the reclaimed set, whence it goes
// after RECLAIMED_KEPT_MS, and releasing what each held of its key's budget
// (it returns the credit released);
// release_budget(budgets, id), which does the last for one hold and says
// where its charge is counted; and reclaimed_balance(the same five keys):
// the account's granted, topped up and held credit once its expired holds
// are reclaimed, or nil for no such account.
const RECLAIM_EXPIRED_HOLDS = `
${LUA_NOW_MS}
${LUA_INT}
-- redis.call(command, key, ...list), in parts: unpack() takes at most a few thousand values.
local function in_parts(command, key, list)
  for i = 1, #list, 1000 do redis.call(command, key, unpack(list, i, math.min(i + 999, #list))) end
end
-- Releases what a hold took of its key's budget; returns the budget's key and period field, or nil for a hold without one.
local function release_budget(budgets_key, id)
  local entry = redis.call('HGET', budgets_key, id)
  if not entry then return nil end
  local budget_key, field, amount = string.match(entry, '^(.-)\t(.-)\t(.-)$')
  redis.call('HINCRBY', budget_key, 'held', int(0 - tonumber(amount)))
  redis.call('HDEL', budgets_key, id)
  return budget_key, field
end
local function reclaim(account_key, holds_key, amounts_key, reclaimed_key, budgets_key)
  local expired = redis.call('ZRANGEBYSCORE', holds_key, '-inf', now_ms)
  if #expired == 0 then return 0 end
  for _, id in ipairs(expired) do release_budget(budgets_key, id) end
  local released, marks, filed = 0, {}, {}
  for _, id in ipairs(expired) do
    released = released + tonumber(redis.call('HGET', amounts_key, id) or '0')
    marks[#marks + 1] = id
    marks[#marks + 1] = 'reclaimed'
    filed[#filed + 1] = int(now_ms)
    filed[#filed + 1] = id
  end
  redis.call('HINCRBY', account_key, 'held', int(0 - released))
  redis.call('ZREMRANGEBYSCORE', holds_key, '-inf', now_ms)
  local forgotten = redis.call('ZRANGEBYSCORE', reclaimed_key, '-inf', now_ms - ${RECLAIMED_KEPT_MS})
  if #forgotten > 0 then
    in_parts('HDEL', amounts_key, forgotten)
    redis.call('ZREMRANGEBYSCORE', reclaimed_key, '-inf', now_ms - ${RECLAIMED_KEPT_MS})
  end
  in_parts('HSET', amounts_key, marks)
  in_parts('ZADD', reclaimed_key, filed)
  return released
end
-- An account is made with its three balances, so a hash without them is no account: one call, where EXISTS was one more.
local function reclaimed_balance(account_key, holds_key, amounts_key, reclaimed_key, budgets_key)
  local b = redis.call('HMGET', account_key, 'granted', 'topped_up', 'held')
  if not (b[1] or b[2] or b[3]) then return nil end
  local released = reclaim(account_key, holds_key, amounts_key, reclaimed_key, budgets_key)
  return tonumber(b[1] or '0'), tonumber(b[2] or '0'), tonumber(b[3] or '0') - released
end
`;

// For scripts that work on a batch, item by item (each_item): the items come
// as one JSON array in ARGV, and each names its keys by where they are in
// KEYS, where every key of the batch is once (see BatchKeys). Each account
// is read once, when the batch first touches it (K: its account, holds,
// amounts and reclaimed keys; false when there is no such account), changed
// in Lua, and written back once by write_accounts() at the end. A script runs
// alone, so nothing can change the account in between; and a batch of n
// costs a few commands per account rather than a dozen per request.
const BATCHED_ACCOUNTS = `
${RECLAIM_EXPIRED_HOLDS}
${LUA_EACH_ITEM}
local accounts, accounts_read = {}, {}
local function account(K)
  local a = accounts[K[1]]
  if a == nil then
    a = false
    local granted, topped_up, held = reclaimed_balance(K[1], K[2], K[3], K[4], K[5])
    if granted then
      a = { key = K[1], holds = K[2], amounts = K[3], reclaimed = K[4], budgets = K[5], granted = granted, topped_up = topped_up, held = held,
            changed = false, opened_expiries = {}, opened_amounts = {}, closed = {}, forgotten = {} }
      accounts_read[#accounts_read + 1] = a
    end
    accounts[K[1]] = a
  end
  return a
end
local function open_hold(a, id, expiry, amount)
  a.held, a.changed = a.held + amount, true
  a.opened_expiries[#a.opened_expiries + 1] = expiry
  a.opened_expiries[#a.opened_expiries + 1] = id
  a.opened_amounts[#a.opened_amounts + 1] = id
  a.opened_amounts[#a.opened_amounts + 1] = int(amount)
end
-- Takes a hold's ticket: false when there is none (settled before), else
-- true and, for a hold under a key's budget, where its charge is counted. A
-- hold still open is released; one that expired was released when reclaimed.
local function close_hold(a, id)
  if a.closed[id] then return false end
  local amount = redis.call('HGET', a.amounts, id)
  if not amount then return false end
  a.closed[id] = true
  if amount == 'reclaimed' then
    a.forgotten[#a.forgotten + 1] = id
    return true
  end
  a.held, a.changed = a.held - tonumber(amount), true
  return true, release_budget(a.budgets, id)
end
local function write_accounts()
  for _, a in ipairs(accounts_read) do
    if #a.opened_expiries > 0 then
      redis.call('ZADD', a.holds, unpack(a.opened_expiries))
      redis.call('HSET', a.amounts, unpack(a.opened_amounts))
    end
    local closed = {}
    for id in pairs(a.closed) do closed[#closed + 1] = id end
    if #closed > 0 then
      redis.call('HDEL', a.amounts, unpack(closed))
      redis.call('ZREM', a.holds, unpack(closed))
    end
    if #a.forgotten > 0 then redis.call('ZREM', a.reclaimed, unpack(a.forgotten)) end
    if a.changed then redis.call('HSET', a.key, 'granted', int(a.granted), 'topped_up', int(a.topped_up), 'held', int(a.held)) end
  end
end
`;

/** A hold's arguments: output_pico is for all n replies per token; budget is -1 for a key without one. */
const HOLD_ARGS = luaArgs([
  'hold_id', 'ttl_ms', 'prompt_pico', 'output_pico', 'max_reply_tokens',
  'rate_checked', 'requests_limit', 'tokens_limit', 'request_tokens', 'concurrent_limit', 'budget', 'budget_field',
] as const);
const HOLD_STATUS = { HELD: 1, NO_CREDIT: -1, NO_ACCOUNT: -3, RATE_LIMITED: -4, OVER_BUDGET: -5 } as const;

// Holds a batch, in order, as if one script ran per hold. ARGV[1]: the holds
// (each_item), each with two more keys, its rate window and its key's budget
// (any key where it has no rate check or no budget), and HOLD_ARGS. Replies
// 5 per hold: a HOLD_STATUS, the amount held or available or which limit
// refused it, reply tokens, then the rate window's counts.
const HOLD = luaScript(`
${BATCHED_ACCOUNTS}
${RATE_LIMIT_LUA}
${HOLD_ARGS.lua('H')}
${luaConstants(HOLD_STATUS)}
local function window_counts(w)
  if w then return w.requests, w.tokens end
  return 0, 0
end
local function hold(K, A)
  local a = account(K)
  if not a then return {NO_ACCOUNT, 0, 0, 0, 0} end
  local w
  if A[H.rate_checked] == 1 then
    w = rate_window(K[6])
    local refused = rate_refusal(w, tonumber(A[H.requests_limit]), tonumber(A[H.tokens_limit]), tonumber(A[H.request_tokens]))
    if refused > 0 then return {RATE_LIMITED, refused, 0, w.requests, w.tokens} end
    -- In flight: the account's open holds (expired ones were reclaimed as it was read), and those opened in this batch.
    local in_flight_limit = tonumber(A[H.concurrent_limit])
    if in_flight_limit > 0 then
      refused = in_flight_refusal(redis.call('ZCARD', a.holds) + #a.opened_expiries / 2, in_flight_limit)
      if refused > 0 then return {RATE_LIMITED, refused, 0, w.requests, w.tokens} end
    end
  end
  local available = a.granted + a.topped_up - a.held
  if available <= 0 then return {NO_CREDIT, available, 0, window_counts(w)} end
  -- A key's budget is spent like the balance: what its open holds take and its period's charges count against it.
  local budget = tonumber(A[H.budget])
  local short, short_status = available, NO_CREDIT
  if budget >= 0 then
    local used = redis.call('HMGET', K[7], 'held', A[H.budget_field])
    local left = budget - tonumber(used[1] or '0') - tonumber(used[2] or '0')
    if left <= 0 then return {OVER_BUDGET, left, 0, window_counts(w)} end
    if left < available then short, short_status = left, OVER_BUDGET end
  end
  local prompt_pico, output_pico = tonumber(A[H.prompt_pico]), tonumber(A[H.output_pico])
  local tokens = tonumber(A[H.max_reply_tokens])
  local amount = math.ceil((prompt_pico + output_pico * tokens) / 1000000)
  if amount > short then
    if output_pico == 0 then return {short_status, short, 0, window_counts(w)} end
    tokens = math.floor((short * 1000000 - prompt_pico) / output_pico)
    if tokens < 1 then return {short_status, short, 0, window_counts(w)} end
    amount = math.ceil((prompt_pico + output_pico * tokens) / 1000000)
  end
  if w then count_request(w, tonumber(A[H.request_tokens])) end
  open_hold(a, A[H.hold_id], int(now_ms + tonumber(A[H.ttl_ms])), amount)
  if budget >= 0 then
    redis.call('HINCRBY', K[7], 'held', int(amount))
    redis.call('HSET', a.budgets, A[H.hold_id], K[7] .. '\\t' .. A[H.budget_field] .. '\\t' .. int(amount))
  end
  return {HELD, amount, tokens, window_counts(w)}
end
local reply = {}
each_item(1, 5, 2, function(K, A)
  for _, v in ipairs(hold(K, A)) do reply[#reply + 1] = v end
end)
write_accounts()
write_rate_windows()
return reply
`);

const EXTEND = luaScript(`
${LUA_NOW_MS}
${LUA_INT}
return redis.call('ZADD', KEYS[1], 'XX', 'CH', int(now_ms + tonumber(ARGV[2])), ARGV[1])
`);

/** A settlement's arguments: request_id and reply_id are the ids the client was given. */
const SETTLE_ARGS = luaArgs([
  'hold_id', 'cost', 'outcome', 'model', 'prompt_tokens', 'cached_tokens', 'completion_tokens',
  'account', 'key', 'endpoint', 'reason', 'user', 'api', 'request_id', 'reply_id', 'service_tier', 'batch_line', 'batch_result',
] as const);
/** REFUSED: amounts that are not whole numbers, with nothing written. */
const SETTLE_STATUS = { SETTLED: 1, SETTLED_BEFORE: 0, REFUSED: -1 } as const;

// Settles a batch, in order, as if one script ran per settlement: ARGV[1] is
// how long usage events are kept in ms (0: for good); ARGV[2] the
// settlements (each_item), each with four more keys, the account's usage
// stream, its daily usage and its key's, and a batch's results (the
// account's key for a request of no batch), and SETTLE_ARGS. Replies with a
// pair each: a SETTLE_STATUS and the charge. Daily totals are summed in Lua
// and added once per batch and group.
//
// A batch line's reply is charged and its result written in the same
// script, so that neither happens without the other: a line run again
// (its replica was lost with the line in flight) finds its result there and
// is not charged again; a line of a batch that is gone is not charged.
const SETTLE = luaScript(`
${BATCHED_ACCOUNTS}
${SETTLE_ARGS.lua('S')}
${luaConstants(SETTLE_STATUS)}
local function whole(v)
  local n = tonumber(v)
  return n and n == math.floor(n) and n >= 0 and n < 2 ^ 53
end
local keep_ms = tonumber(ARGV[1])
-- Appending trims the events past retention (a few at a time, never a sweep); MINID 0 trims none.
local keep_after = keep_ms > 0 and int(now_ms - keep_ms) or '0'
-- Each day's totals per group (model, API and tier: what the usage page shows), the account's and its key's, summed
-- over the batch: requests, prompt, cached and completion tokens, cost.
local TOTALS = { 'requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens', 'cost' }
local totals, totals_read = {}, {}
local function add_to_totals(key, group, prompt, cached, completion, cost)
  local by_group = totals[key]
  if not by_group then
    by_group = {}
    totals[key] = by_group
  end
  local t = by_group[group]
  if not t then
    t = { key = key, group = group, 0, 0, 0, 0, 0 }
    by_group[group] = t
    totals_read[#totals_read + 1] = t
  end
  t[1], t[2], t[3], t[4], t[5] = t[1] + 1, t[2] + prompt, t[3] + cached, t[4] + completion, t[5] + cost
end
local function settle(K, A)
  -- Checked before any write: a script that fails half-way keeps what it wrote, and a retry would write it again.
  local prompt, cached, completion = A[S.prompt_tokens], A[S.cached_tokens], A[S.completion_tokens]
  if not (whole(A[S.cost]) and whole(prompt) and whole(cached) and whole(completion)) then return REFUSED, 0 end
  local a = account(K)
  if not a then return SETTLED_BEFORE, 0 end
  local open, budget_key, budget_field = close_hold(a, A[S.hold_id])
  if not open then return SETTLED_BEFORE, 0 end
  local line = A[S.batch_line]
  local batch_line = line ~= '' and A[S.outcome] == 'complete'
  if batch_line and (redis.call('HEXISTS', K[9], line) == 1 or redis.call('HEXISTS', K[9], '#total') == 0) then return SETTLED_BEFORE, 0 end
  local charge = 0
  if A[S.outcome] == 'complete' then
    -- Never below zero: a hold that expired (or an upstream that overshot) is charged at most what is left.
    charge = math.min(tonumber(A[S.cost]), math.max(a.granted + a.topped_up - a.held, 0))
    local from_granted = math.min(charge, math.max(a.granted, 0))
    a.granted, a.topped_up, a.changed = a.granted - from_granted, a.topped_up - (charge - from_granted), true
    local group = A[S.model] .. '\\t' .. A[S.api] .. '\\t' .. A[S.service_tier]
    add_to_totals(K[7], group, tonumber(prompt), tonumber(cached), tonumber(completion), charge)
    add_to_totals(K[8], group, tonumber(prompt), tonumber(cached), tonumber(completion), charge)
    if budget_key then redis.call('HINCRBY', budget_key, budget_field, int(charge)) end
  end
  if batch_line then
    redis.call('HSET', K[9], line, A[S.batch_result])
    redis.call('HINCRBY', K[9], '#succeeded', 1)
    redis.call('HINCRBY', K[9], '#cost', int(charge))
    redis.call('HINCRBY', K[9], '#prompt_tokens', int(prompt))
    redis.call('HINCRBY', K[9], '#cached_tokens', int(cached))
    redis.call('HINCRBY', K[9], '#completion_tokens', int(completion))
  end
  redis.call('XADD', K[6], 'MINID', '=', keep_after, '*', 'request_id', A[S.request_id], 'reply_id', A[S.reply_id], 'account', A[S.account], 'key', A[S.key],
    'model', A[S.model], 'endpoint', A[S.endpoint], 'outcome', A[S.outcome], 'reason', A[S.reason],
    'prompt_tokens', int(prompt), 'cached_tokens', int(cached), 'completion_tokens', int(completion),
    'cost', int(A[S.cost]), 'charged', int(charge), 'user', A[S.user], 'api', A[S.api], 'service_tier', A[S.service_tier])
  return SETTLED, charge
end
local reply = {}
each_item(2, 5, 4, function(K, A)
  local done, charge = settle(K, A)
  reply[#reply + 1] = done
  reply[#reply + 1] = charge
end)
write_accounts()
-- A group's totals are read and written whole: one HMGET and one HSET, where an HINCRBY each was five calls.
-- With the rate window's one HSET and no EXISTS before an account is read, a request's two scripts run 19
-- commands where they ran 25: against 55a49c6, \`node bench/redis-billing.mjs 10 2\` (the builds in turns,
-- twice) gave a 3-primary cluster 12% less Redis CPU a request (173 against 195 µs) and 15% more
-- requests/s (2026-11-27).
for _, t in ipairs(totals_read) do
  local fields = {}
  for i, name in ipairs(TOTALS) do fields[i] = t.group .. '\\t' .. name end
  local before = redis.call('HMGET', t.key, unpack(fields))
  local sums = {}
  for i, field in ipairs(fields) do
    sums[#sums + 1] = field
    sums[#sums + 1] = int(tonumber(before[i] or '0') + t[i])
  end
  redis.call('HSET', t.key, unpack(sums))
  -- The group's first request of the day sets the totals' expiry.
  if not before[1] then redis.call('EXPIRE', t.key, ${DAILY_TOTALS_KEPT_DAYS} * 86400) end
end
return reply
`);

// KEYS: the account's five (accountKeys). Replies 1 (0 for no such account),
// its granted, topped up and held credit, and its open holds (its requests in
// flight, fleet-wide), once expired holds are reclaimed.
const BALANCE = luaScript(`
${RECLAIM_EXPIRED_HOLDS}
local granted, topped_up, held = reclaimed_balance(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if not granted then return {0, 0, 0, 0, 0} end
return {1, granted, topped_up, held, redis.call('ZCARD', KEYS[2])}
`);

// KEYS: the account's five (accountKeys), its ledger, its applied changes.
// ARGV: kind (grant | top_up | deduct), amount, note, account id, change id
// ('' for none), the most a balance may be. Deductions take granted credit
// first and stop at what open holds leave (the requests they pay for are
// still charged in full); a grant or top-up that would take the balance past
// the most it may be changes nothing. A change whose id was applied before
// changes nothing and answers the balance it left then. Replies an
// ADJUST_STATUS, the balance and the amount moved.
const ADJUST_STATUS = { NO_ACCOUNT: 0, APPLIED: 1, APPLIED_BEFORE: 2, OVER_MAXIMUM: 3 } as const;
const ADJUST = luaScript(`
${RECLAIM_EXPIRED_HOLDS}
${luaConstants(ADJUST_STATUS)}
local granted, topped_up, held = reclaimed_balance(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if not granted then return {NO_ACCOUNT, 0, 0} end
if ARGV[5] ~= '' then
  local before = redis.call('HGET', KEYS[7], ARGV[5])
  if before then return {APPLIED_BEFORE, tonumber(before), 0} end
end
local amount = tonumber(ARGV[2])
if ARGV[1] == 'deduct' then
  amount = math.min(amount, math.max(0, granted + topped_up - held))
  local from_granted = math.min(amount, math.max(granted, 0))
  granted = granted - from_granted
  topped_up = topped_up - (amount - from_granted)
else
  if granted + topped_up + amount > tonumber(ARGV[6]) then return {OVER_MAXIMUM, granted + topped_up, 0} end
  if ARGV[1] == 'grant' then granted = granted + amount else topped_up = topped_up + amount end
end
redis.call('HSET', KEYS[1], 'granted', int(granted), 'topped_up', int(topped_up))
redis.call('XADD', KEYS[6], '*', 'account', ARGV[4], 'kind', ARGV[1], 'amount', int(amount), 'note', ARGV[3], 'change', ARGV[5])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[7], ARGV[5], int(granted + topped_up)) end
return {APPLIED, granted + topped_up, amount}
`);

const accountKeys = (account: string) => [
  redisKeys.account(account), redisKeys.holds(account), redisKeys.holdAmounts(account), redisKeys.reclaimedHolds(account), redisKeys.holdBudgets(account),
];

/** The batch's KEYS, an account's five together in accountKeys' order. */
class LedgerKeys extends BatchKeys {
  account(account: string): number {
    return this.group(redisKeys.account(account), () => accountKeys(account));
  }
}

export interface HoldRequest {
  account: string;
  requestId: string;
  ttlMs: number;
  prices: TokenPrices;
  /** Prompt tokens counted, or an upper bound on them. */
  promptTokens: number;
  n: number;
  /** The most reply tokens per choice the request allows. */
  maxReplyTokens: number;
  /** The calling key's budget, where it has one. */
  budget?: KeyBudgetCheck;
}

/** A key's budget as a hold checks it: the limit in micro-units, and the key and field its current period is counted in. */
export interface KeyBudgetCheck {
  key: string;
  limit: number;
  periodField: string;
}

/** What a hold came to; `rate`, with a rate check: where the key stands in its window. */
export type HoldResult =
  | { kind: 'held'; amount: number; maxReplyTokens: number; rate?: RateUse }
  | { kind: 'no_credit'; available: number; rate?: RateUse }
  | { kind: 'rate_limited'; over: RateRefusal; rate: RateUse }
  | { kind: 'over_budget'; left: number; rate?: RateUse }
  | { kind: 'no_account' };

export interface HoldAsk {
  hold: HoldRequest;
  /** The account's rate limit, checked and counted first. */
  rate?: RateCheck;
}

/**
 * Holds, for each ask in order, the most its request can cost, or as many
 * reply tokens as the available balance pays for. With a rate check, the
 * request is first counted against its key's budget, and refused when the
 * budget is spent. One script for the whole batch.
 */
export async function holdCredits(redis: Redis, asks: HoldAsk[]): Promise<HoldResult[]> {
  const keys = new LedgerKeys();
  const items = asks.map(({ hold: h, rate }) => {
    const account = keys.account(h.account);
    const budget = h.budget;
    const [requestsLimit, tokensLimit, requestTokens, concurrentLimit] = rate?.args ?? [0, 0, 0, 0];
    return [
      account, rate ? keys.key(rate.key) : account, budget ? keys.key(budget.key) : account,
      ...HOLD_ARGS.list({
        hold_id: h.requestId,
        ttl_ms: h.ttlMs,
        prompt_pico: h.promptTokens * h.prices.missPico,
        output_pico: h.n * h.prices.outputPico,
        max_reply_tokens: h.maxReplyTokens,
        rate_checked: rate ? 1 : 0,
        requests_limit: requestsLimit,
        tokens_limit: tokensLimit,
        request_tokens: requestTokens,
        concurrent_limit: concurrentLimit,
        budget: budget ? budget.limit : -1,
        budget_field: budget ? budget.periodField : '',
      }),
    ];
  });
  const reply = (await HOLD.runDurably(redis, keys.list, [luaJson(items)])) as number[];
  return asks.map(({ rate }, i): HoldResult => {
    const [status, amount, tokens, requests, tokensUsed] = reply.slice(5 * i, 5 * i + 5);
    if (status === HOLD_STATUS.NO_ACCOUNT) return { kind: 'no_account' };
    const use = rate && rateUse(rate, requests, tokensUsed);
    if (status === HOLD_STATUS.RATE_LIMITED) return { kind: 'rate_limited', over: RATE_REFUSALS[amount], rate: use! };
    if (status === HOLD_STATUS.NO_CREDIT) return { kind: 'no_credit', available: amount, rate: use };
    if (status === HOLD_STATUS.OVER_BUDGET) return { kind: 'over_budget', left: amount, rate: use };
    return { kind: 'held', amount, maxReplyTokens: tokens, rate: use };
  });
}

/** Pushes an open hold's expiry forward while its request is still being served. */
export async function extendHold(redis: Redis, account: string, requestId: string, ttlMs: number): Promise<void> {
  await EXTEND.run(redis, [redisKeys.holds(account)], [requestId, ttlMs]);
}

export type SettleOutcome = 'complete' | 'client_gone' | 'broke_off' | 'failed';

export interface Settlement {
  account: string;
  keyId: string;
  /** The id the request's hold is filed under: unique, unlike a request id a client chose. */
  requestId: string;
  /** The ids the client was given, for its usage event: the request's (`x-request-id`) and the reply's (`chatcmpl-…`). */
  clientIds?: { requestId: string; replyId: string };
  model: string;
  endpoint: string;
  outcome: SettleOutcome;
  /** Why it did not complete, for the usage event. */
  reason?: string;
  /** The end user the client named (`user`), for the usage event: operators trace abuse to it. */
  user?: string;
  /** Which API the request came through: chat, completions, embeddings (chat where not said: a journal from before). */
  api?: string;
  /** The service tier that served it, whose prices `cost` is at (default where not said: a journal from before). */
  tier?: ServiceTier;
  usage: Usage;
  /** What the reply costs in micro-units (charged only when complete). */
  cost: number;
  /** For a line of a batch: its result, written with its charge (batches/batch-store.ts). */
  batchResult?: BatchLineResult;
}

/** A batch line's result, as its settlement writes it: into the batch's results hash, under the line's number. */
export interface BatchLineResult {
  resultsKey: string;
  line: string;
  result: string;
}

/** The UTC day (YYYY-MM-DD) daily usage totals are filed under. */
export const utcDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

// Every settlement files under today; the date text is made once a day, not once a request.
let today = { start: 0, end: 0, day: '' };
function currentUtcDay(now: number): string {
  if (now < today.start || now >= today.end) {
    const start = now - (now % 86_400_000);
    today = { start, end: start + 86_400_000, day: utcDay(now) };
  }
  return today.day;
}

/** What became of a settlement: charged (0 for a reply that did not complete), settled before, or refused as malformed. */
export type SettleResult = { charged: number } | 'already settled' | 'refused';

/**
 * Releases each settlement's hold and, for a complete reply, charges it;
 * appends its usage event, dropping the account's events older than
 * `keepEventsMs` (0: none). One script for the whole batch, each settlement
 * applied whole or, when malformed, not at all.
 */
export async function settleHolds(redis: Redis, batch: Settlement[], keepEventsMs = 0): Promise<SettleResult[]> {
  const day = currentUtcDay(Date.now());
  const keys = new LedgerKeys();
  const items = batch.map((s) => {
    const u = s.usage;
    const account = keys.account(s.account);
    return [
      account, keys.key(redisKeys.usageEvents(s.account)), keys.key(redisKeys.dailyUsage(s.account, day)), keys.key(redisKeys.keyDailyUsage(s.account, s.keyId, day)),
      s.batchResult ? keys.key(s.batchResult.resultsKey) : account,
      ...SETTLE_ARGS.list({
        hold_id: s.requestId,
        cost: s.cost,
        outcome: s.outcome,
        model: s.model,
        prompt_tokens: u.prompt_tokens,
        cached_tokens: u.cached_tokens,
        completion_tokens: u.completion_tokens,
        account: s.account,
        key: s.keyId,
        endpoint: s.endpoint,
        reason: s.reason ?? '',
        user: s.user ?? '',
        api: s.api ?? 'chat',
        request_id: s.clientIds?.requestId ?? s.requestId,
        reply_id: s.clientIds?.replyId ?? '',
        service_tier: s.tier ?? 'default',
        batch_line: s.batchResult?.line ?? '',
        batch_result: s.batchResult?.result ?? '',
      }),
    ];
  });
  const reply = (await SETTLE.runDurably(redis, keys.list, [keepEventsMs, luaJson(items)])) as number[];
  return batch.map((_, i) => {
    const status = reply[2 * i];
    return status === SETTLE_STATUS.SETTLED ? { charged: reply[2 * i + 1] } : status === SETTLE_STATUS.SETTLED_BEFORE ? 'already settled' : 'refused';
  });
}

export interface Balance {
  granted: number;
  toppedUp: number;
  held: number;
}

export async function readBalance(redis: Redis, account: string): Promise<Balance | undefined> {
  const [exists, granted, toppedUp, held] = (await BALANCE.run(redis, accountKeys(account), [])) as number[];
  return exists ? { granted, toppedUp, held } : undefined;
}

export interface BalanceSummary extends Balance {
  /** granted + topped up */
  total: number;
  /** total less what open holds take, never below zero */
  available: number;
}

/** An account's balance with its total and available amounts; zeros for no such account. */
export async function balanceSummary(redis: Redis, account: string): Promise<BalanceSummary> {
  const b = (await readBalance(redis, account)) ?? { granted: 0, toppedUp: 0, held: 0 };
  const total = b.granted + b.toppedUp;
  return { ...b, total, available: Math.max(0, total - b.held) };
}

/** What an account's next request would find before its own size counts: credit available, and requests in flight. */
export async function admissionStanding(redis: Redis, account: string): Promise<{ available: number; inFlight: number }> {
  const [, granted, toppedUp, held, inFlight] = (await BALANCE.run(redis, accountKeys(account), [])) as number[];
  return { available: granted + toppedUp - held, inFlight };
}

export type CreditChange = 'grant' | 'top_up' | 'deduct';

/**
 * What a credit change came to: the balance after it and the amount moved (a deduction stops at what open holds
 * leave), or, for a change id applied before, the balance it left then; `over_maximum` for an addition that would
 * take the balance past MAX_BALANCE_MICROS.
 */
export type CreditChangeResult = { kind: 'applied'; balance: number; amount: number } | { kind: 'applied_before'; balance: number } | { kind: 'no_account' } | { kind: 'over_maximum'; balance: number };

/**
 * Grants, tops up or deducts credit with a note in the account's ledger.
 * With a `changeId` (an Idempotency-Key, a redeemed code) the change is
 * applied once however often it is retried.
 */
export async function changeCredit(redis: Redis, account: string, kind: CreditChange, amount: number, note: string, changeId = ''): Promise<CreditChangeResult> {
  if (!Number.isSafeInteger(amount) || amount <= 0 || amount > MAX_BALANCE_MICROS) throw new RangeError(`a credit change is 1 to ${MAX_BALANCE_MICROS} micro-units, not ${amount}`);
  const keys = [...accountKeys(account), redisKeys.ledger(account), redisKeys.appliedChanges(account)];
  const [status, balance, moved] = (await ADJUST.runDurably(redis, keys, [kind, amount, note, account, changeId, MAX_BALANCE_MICROS])) as number[];
  if (status === ADJUST_STATUS.NO_ACCOUNT) return { kind: 'no_account' };
  if (status === ADJUST_STATUS.OVER_MAXIMUM) return { kind: 'over_maximum', balance };
  return status === ADJUST_STATUS.APPLIED_BEFORE ? { kind: 'applied_before', balance } : { kind: 'applied', balance, amount: moved };
}
