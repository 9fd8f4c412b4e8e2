// What an account keeps in Redis for its batches, counted against
// `gateway.batches.storedBytesPerAccount`: each uploaded file and each
// batch's stored lines, by their bytes, until Redis lets them expire. The
// bytes are counted and the cap checked in one script before any is
// written, so uploads or batches sent at once cannot pass the cap together
// (a listing of what was kept, then a write, let twelve 32 MiB uploads sent
// at once keep 361 MiB against a 256 MiB cap), and a batch made again and
// again from one file counts each copy of its lines.
import type { Redis } from 'ioredis';
import { ApiError } from '../protocol/errors.js';
import { redisKeys } from '../redis/keys.js';
import { LUA_INT, LUA_NOW_MS, luaScript } from '../redis/lua-script.js';

/** What is counted: an uploaded file's content, or a batch's lines. */
export type StoredItem = `file:${string}` | `batch:${string}`;

/**
 * Lua, for a script whose KEYS[items] and KEYS[sizes] are the account's storedBytes keys, with now_ms declared:
 * `keep_for(member, ms)` moves an item's end (when Redis drops its data) to `ms` from now, where it is counted;
 * both keys live as long as their last item.
 */
export const LUA_KEEP_STORED_FOR = (items: number, sizes: number) => `
local function keep_for(member, ms)
  if not redis.call('HGET', KEYS[${sizes}], member) then return end
  redis.call('ZADD', KEYS[${items}], now_ms + ms, member)
  local last = redis.call('ZRANGE', KEYS[${items}], -1, -1, 'WITHSCORES')[2]
  for _, key in ipairs({ KEYS[${items}], KEYS[${sizes}] }) do redis.call('PEXPIREAT', key, string.format('%d', tonumber(last))) end
end`;

// KEYS: the account's items (member → when Redis drops its data) and their sizes (member → bytes, '#total').
// ARGV: the item, its bytes, the cap, ms to keep it. First gives back the bytes of items past their end (a
// thousand a call: each item ends once, and was one of the account's requests). Answers -1 where counted, else the
// bytes the account keeps.
const RESERVE = luaScript(`
${LUA_NOW_MS}
${LUA_INT}
${LUA_KEEP_STORED_FOR(1, 2)}
for _, ended in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, 1000)) do
  redis.call('HINCRBY', KEYS[2], '#total', int(-tonumber(redis.call('HGET', KEYS[2], ended) or '0')))
  redis.call('HDEL', KEYS[2], ended)
  redis.call('ZREM', KEYS[1], ended)
end
local kept = tonumber(redis.call('HGET', KEYS[2], '#total') or '0')
local bytes = tonumber(ARGV[2])
if kept + bytes > tonumber(ARGV[3]) then return kept end
redis.call('HSET', KEYS[2], ARGV[1], int(bytes))
redis.call('HINCRBY', KEYS[2], '#total', int(bytes))
keep_for(ARGV[1], tonumber(ARGV[4]))
return -1
`);

// KEYS: as RESERVE's. ARGV: the item. Its bytes go back; with nothing left counted, both keys go.
const RELEASE = luaScript(`
${LUA_INT}
local bytes = redis.call('HGET', KEYS[2], ARGV[1])
if not bytes then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HINCRBY', KEYS[2], '#total', int(-tonumber(bytes))) <= 0 then redis.call('DEL', KEYS[1], KEYS[2]) end
return 1
`);

// KEYS: as RESERVE's. ARGV: the item, ms to keep it.
const KEEP = luaScript(`
${LUA_NOW_MS}
${LUA_KEEP_STORED_FOR(1, 2)}
keep_for(ARGV[1], tonumber(ARGV[2]))
return 0
`);

const keysOf = (account: string) => {
  const k = redisKeys.storedBytes(account);
  return [k.items, k.sizes];
};

/**
 * Counts `bytes` more for the account, kept for `keepMs`, or refuses them (400 `storage_limit_reached`, on
 * `param`) where the account would keep more than `capBytes`.
 */
export async function reserveStoredBytes(redis: Redis, account: string, item: StoredItem, bytes: number, capBytes: number, keepMs: number, param: string | null): Promise<void> {
  const kept = Number(await RESERVE.run(redis, keysOf(account), [item, bytes, capBytes, keepMs]));
  if (kept < 0) return;
  throw new ApiError(
    400,
    'invalid_request_error',
    `This account keeps ${kept} bytes of batch files and batches, and may keep at most ${capBytes}; this needs ${bytes} more: delete files or batches it no longer needs, then try again.`,
    'storage_limit_reached',
    param,
  );
}

/** The item's count now lasts as long as its data: `keepMs` from now. */
export async function keepStoredFor(redis: Redis, account: string, item: StoredItem, keepMs: number): Promise<void> {
  await KEEP.run(redis, keysOf(account), [item, keepMs]);
}

/** The item's bytes are no longer the account's: its data was deleted, or never fully written. */
export async function releaseStoredBytes(redis: Redis, account: string, item: StoredItem): Promise<void> {
  await RELEASE.run(redis, keysOf(account), [item]);
}

/**
 * What Redis keeps of an item beside its data, counted with it: a file's metadata and its places in the
 * account's list and in this count; a batch's hash, counters and indexes. Counted as its bytes only, a
 * tenant's many tiny uploads (a request each, within its rate limit) would each keep memory the cap never
 * saw: 5,000 uploads of 126 bytes took 1,064 bytes each of Redis's used_memory (2026-11-29).
 */
export const STORED_ITEM_OVERHEAD_BYTES = 1024;

/**
 * Writes an item's data once its bytes and STORED_ITEM_OVERHEAD_BYTES are counted (refused past the cap, as
 * reserveStoredBytes), for `count.keepMs` while it is written; where writing fails, they are given back.
 */
export async function storeCounted<T>(redis: Redis, account: string, item: StoredItem, count: { bytes: number; capBytes: number; keepMs: number; param: string | null }, write: () => Promise<T>): Promise<T> {
  await reserveStoredBytes(redis, account, item, count.bytes + STORED_ITEM_OVERHEAD_BYTES, count.capBytes, count.keepMs, count.param);
  try {
    return await write();
  } catch (err) {
    await releaseStoredBytes(redis, account, item).catch(() => {});
    throw err;
  }
}
