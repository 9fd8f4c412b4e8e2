// API keys: 256 random bits behind a recognisable prefix, stored only as a
// keyed hash (HMAC with the server secret), so a copy of Redis cannot be
// turned back into working keys. The full key exists once: in the answer to
// its creation.
import { createHmac, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { isServiceTier, type ServiceTier } from '../protocol/service-tier.js';
import { redisKeys } from '../redis/keys.js';
import { luaScript } from '../redis/lua-script.js';

export const API_KEY_PREFIX = 'sk-parley-';
const API_KEY_FORMAT = /^sk-parley-[A-Za-z0-9_-]{43}$/;

/**
 * The most keys an account holds that are not revoked, and the most revoked
 * keys it keeps to list (the latest revoked; older ones are forgotten). A
 * member makes and revokes keys at will: without these, each would be kept
 * in Redis, and listed on every page of keys, for ever.
 */
export const MAX_LIVE_KEYS = 100;
export const REVOKED_KEYS_KEPT = 100;

/** A key not made: the account holds MAX_LIVE_KEYS keys that are not revoked. */
export class TooManyKeys extends Error {
  constructor() {
    super(`the account has ${MAX_LIVE_KEYS} keys that are not revoked, the most it may hold: revoke one first`);
  }
}

// KEYS: the account's keys and its revoked keys. ARGV: the new key's id, when it was made, the cap. Counts the key
// in where the account has room (1), in one script so that keys made at once cannot pass the cap together; else 0.
const COUNT_NEW_KEY = luaScript(`
if redis.call('ZCARD', KEYS[1]) - redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
`);

// KEYS: the account's keys and its revoked keys. ARGV: the key's id, when it was revoked, how many revoked keys
// are kept. Counts the key as revoked, then forgets the revoked keys past that many, the earliest revoked first,
// and answers their ids (their records are the caller's to delete).
const COUNT_REVOKED_KEY = luaScript(`
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1]) end
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
local forgotten = {}
if over > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    forgotten[#forgotten + 1] = id
  end
end
return forgotten
`);

const accountKeySets = (account: string) => [redisKeys.accountKeys(account), redisKeys.revokedKeys(account)];

export interface ApiKeyRecord {
  id: string;
  account: string;
  name: string;
  created: number;
  lastUsed: number | null;
  /** The last four characters, for the masked form `sk-parley-...abcd`. */
  suffix: string;
  revoked: boolean;
  /** The models the key may call; null for every model its account may. */
  models: string[] | null;
  /** When the key stops working (ms); null for never. */
  expiresAt: number | null;
  /** The most the key may spend per period, in micro-units; null for no budget. */
  budget: KeyBudget | null;
  /** The tier its requests are served at unless they ask for another; only a `priority` key may ask for `priority`. */
  tier: ServiceTier;
}

export const BUDGET_PERIODS = ['day', 'month', 'total'] as const;
export type BudgetPeriod = (typeof BUDGET_PERIODS)[number];

export interface KeyBudget {
  limit: number;
  period: BudgetPeriod;
}

/** What an operator or member limits a key to; null clears a limit. */
export interface KeyLimits {
  models?: string[] | null;
  expiresAt?: number | null;
  budget?: KeyBudget | null;
  /** null: back to `default`. */
  tier?: ServiceTier | null;
}

/** The field of a key's budget hash its spending in the period that holds `now` (UTC) is counted in. */
export function budgetPeriodField(period: BudgetPeriod, now: number): string {
  if (period === 'total') return 'spent:total';
  const iso = new Date(now).toISOString();
  return period === 'day' ? `spent:d:${iso.slice(0, 10)}` : `spent:m:${iso.slice(0, 7)}`;
}

/** When the budget's current period ends (ms), or null for a total budget. */
export function budgetRenewsAt(period: BudgetPeriod, now: number): number | null {
  const d = new Date(now);
  if (period === 'day') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
  if (period === 'month') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return null;
}

/** What a key has spent in its budget's current period, and holds now (micro-units). */
export async function keySpend(redis: Redis, record: Pick<ApiKeyRecord, 'account' | 'id' | 'budget'>, now = Date.now()): Promise<{ spent: number; held: number }> {
  if (!record.budget) return { spent: 0, held: 0 };
  const [held, spent] = await redis.hmget(redisKeys.keyBudget(record.account, record.id), 'held', budgetPeriodField(record.budget.period, now));
  return { spent: Number(spent ?? 0), held: Number(held ?? 0) };
}

export const isWellFormedKey = (key: string) => API_KEY_FORMAT.test(key);
export const maskedKey = (suffix: string) => `${API_KEY_PREFIX}...${suffix}`;

export function hashApiKey(secret: string, key: string): string {
  return createHmac('sha256', secret).update(key).digest('hex');
}

function toRecord(h: Record<string, string>): ApiKeyRecord {
  return {
    id: h.id,
    account: h.account,
    name: h.name,
    created: Number(h.created),
    lastUsed: h.last_used ? Number(h.last_used) : null,
    suffix: h.suffix,
    revoked: h.revoked === '1',
    models: h.models ? (JSON.parse(h.models) as string[]) : null,
    expiresAt: h.expires_at !== undefined && h.expires_at !== '' ? Number(h.expires_at) : null,
    budget: h.budget ? { limit: Number(h.budget), period: (h.budget_period || 'total') as BudgetPeriod } : null,
    tier: isServiceTier(h.tier) ? h.tier : 'default',
  };
}

/** A key's limits as hash fields: set where given, '' where cleared. */
function limitFields(limits: KeyLimits): Record<string, string> {
  const fields: Record<string, string> = {};
  if (limits.models !== undefined) fields.models = limits.models === null ? '' : JSON.stringify(limits.models);
  if (limits.expiresAt !== undefined) fields.expires_at = limits.expiresAt === null ? '' : String(limits.expiresAt);
  if (limits.budget !== undefined) {
    fields.budget = limits.budget === null ? '' : String(limits.budget.limit);
    fields.budget_period = limits.budget === null ? '' : limits.budget.period;
  }
  if (limits.tier !== undefined) fields.tier = limits.tier ?? '';
  return fields;
}

/** Creates a key for an account; the returned `key` is the only time it is seen. */
export async function createApiKey(redis: Redis, secret: string, account: string, name: string, limits: KeyLimits = {}): Promise<{ key: string; record: ApiKeyRecord }> {
  const key = API_KEY_PREFIX + randomBytes(32).toString('base64url');
  const hash = hashApiKey(secret, key);
  const record: ApiKeyRecord = {
    id: `key_${randomBytes(8).toString('hex')}`,
    account,
    name,
    created: Date.now(),
    lastUsed: null,
    suffix: key.slice(-4),
    revoked: false,
    models: limits.models ?? null,
    expiresAt: limits.expiresAt ?? null,
    budget: limits.budget ?? null,
    tier: limits.tier ?? 'default',
  };
  // Three keys in three slots on a cluster; the key is counted first, and works from the last write on, once it can
  // be found and listed.
  if (!(await COUNT_NEW_KEY.run(redis, accountKeySets(account), [record.id, record.created, MAX_LIVE_KEYS]))) throw new TooManyKeys();
  await redis.set(redisKeys.apiKeyById(record.id), hash);
  await redis.hset(redisKeys.apiKey(hash), { id: record.id, account, name, created: record.created, suffix: record.suffix, revoked: '0', ...limitFields(limits) });
  return { key, record };
}

export async function findApiKeyByHash(redis: Redis, hash: string): Promise<ApiKeyRecord | undefined> {
  const h = await redis.hgetall(redisKeys.apiKey(hash));
  return h.id ? toRecord(h) : undefined;
}

export async function findApiKeyById(redis: Redis, id: string): Promise<ApiKeyRecord | undefined> {
  const hash = await redis.get(redisKeys.apiKeyById(id));
  return hash ? findApiKeyByHash(redis, hash) : undefined;
}

export async function listApiKeys(redis: Redis, account: string): Promise<ApiKeyRecord[]> {
  const ids = await redis.zrange(redisKeys.accountKeys(account), 0, -1);
  if (ids.length === 0) return [];
  // One command per key, not MGET or a pipeline: on a cluster each key may be in a slot of its own.
  const hashes = await Promise.all(ids.map((id) => redis.get(redisKeys.apiKeyById(id))));
  const rows = await Promise.all(hashes.filter((h): h is string => h !== null).map((hash) => redis.hgetall(redisKeys.apiKey(hash))));
  return rows.filter((h) => h.id).map(toRecord);
}

/**
 * Changes a key's limits (only within `account` when one is given) and tells
 * every replica to drop it from its cache, so the change holds at once.
 * Returns the key as it is now, or undefined for no such key.
 */
export async function setKeyLimits(redis: Redis, keyId: string, limits: KeyLimits, account?: string): Promise<ApiKeyRecord | undefined> {
  const hash = await redis.get(redisKeys.apiKeyById(keyId));
  if (!hash) return undefined;
  const owner = await redis.hget(redisKeys.apiKey(hash), 'account');
  if (!owner || (account && owner !== account)) return undefined;
  const fields = limitFields(limits);
  if (Object.keys(fields).length > 0) await redis.hset(redisKeys.apiKey(hash), fields);
  await redis.publish(redisKeys.keyRevocations, hash);
  return findApiKeyByHash(redis, hash);
}

/**
 * Revokes a key and tells every replica to drop it from its cache; then
 * forgets the account's revoked keys past REVOKED_KEYS_KEPT. Returns false
 * for no such key.
 */
export async function revokeApiKey(redis: Redis, keyId: string): Promise<boolean> {
  const hash = await redis.get(redisKeys.apiKeyById(keyId));
  if (!hash) return false;
  const account = await redis.hget(redisKeys.apiKey(hash), 'account');
  if (!account) return false;
  await redis.hset(redisKeys.apiKey(hash), 'revoked', '1');
  await redis.publish(redisKeys.keyRevocations, hash);
  const forgotten = (await COUNT_REVOKED_KEY.run(redis, accountKeySets(account), [keyId, Date.now(), REVOKED_KEYS_KEPT])) as string[];
  for (const id of forgotten) await forgetApiKey(redis, account, id);
  return true;
}

/**
 * Deletes a revoked key's records: nothing of it is left to find or list. Its
 * budget's use stays while a request made with it before its revocation still
 * holds credit, for that request's settlement to give back.
 */
async function forgetApiKey(redis: Redis, account: string, keyId: string): Promise<void> {
  const hash = await redis.get(redisKeys.apiKeyById(keyId));
  if (hash) await redis.del(redisKeys.apiKey(hash));
  await redis.del(redisKeys.apiKeyById(keyId));
  const budget = redisKeys.keyBudget(account, keyId);
  if (Number((await redis.hget(budget, 'held')) ?? 0) <= 0) await redis.del(budget);
}

export async function touchApiKey(redis: Redis, hash: string, at: number): Promise<void> {
  await redis.hset(redisKeys.apiKey(hash), 'last_used', at);
}
