// Shares each model's affinity keys through Redis, so that every replica
// places every key alike. Redis orders the keys by when it first heard of
// each (its own clock, strictly increasing), so the order is one for the
// whole fleet and a key arriving later never lands before one placed
// already. In the background, every SHARE_INTERVAL_MS, a replica sends the
// keys it saw and takes back what changed in the fleet's order since it last
// asked: the keys placed after the last it has, and those forgotten since
// (Redis counts forgettings, and keeps the latest MAX_KNOWN_PREFIXES); a
// replica that is new, or behind what Redis still lists, takes the whole
// order, as each does every WHOLE_EVERY_MS. Taking the whole order at every
// exchange cost an idle replica 20 ms of main-thread time a second at 4,096
// keys, about 4 ms an exchange (`node bench/prefix-sharing-cost.mjs`). A
// key's moves (known-prefixes.ts) go the same way: Redis keeps each key's
// latest and numbers the moves, and a replica takes those made since the last
// it heard of (all of them, where it takes the whole order). A
// key this replica has never seen waits one round trip (at most
// PLACE_WAIT_MS) to be added to the fleet's order before it is placed, so
// that a new tenant or session gets the same home on every replica from its
// first request; known keys never wait. While Redis is away each replica
// goes on with what it knows.
import type { Redis } from 'ioredis';
import { luaScript } from '../redis/lua-script.js';
import { redisKeys } from '../redis/keys.js';
import { KnownPrefixes, MAX_KNOWN_PREFIXES, PREFIX_IDLE_MS } from './known-prefixes.js';

export const SHARE_INTERVAL_MS = 200;
/**
 * The longest a request with a new key waits for the fleet's order before it is placed on what this replica
 * knows. The same request waits on the same Redis for its credit hold, so a Redis this slow fails it anyway.
 */
const PLACE_WAIT_MS = 500;
/**
 * How often a replica takes the whole order all the same, so that nothing it missed outlives a minute: a
 * forgetting made by a replica of a version before these exchanges (during a rolling upgrade) is listed nowhere.
 */
export const WHOLE_EVERY_MS = 60_000;

// KEYS: first seen, last seen (scores: Redis time in µs), forgotten (score: the count of forgettings when each
// went), forgetting (hash: that count, the highest of it no longer listed, the last place given, the count of
// moves, and when this order began: keys that all expired begin another), moved to (hash: each key away from its
// home, and where it went), moves (score: the count of moves when each key last moved). ARGV: idle ms, most kept,
// the last place this replica has ('': none, it takes the whole order), the count of forgettings it has heard
// of, when the order it has began, the count of moves it has heard of, how many moves it sends, then each move
// (a key, and where it went: '' for home), then each key seen.
// Returns: 1 and the whole order, or 0 and what changed; the count of forgettings; when the order began; the keys
// added, each with its place; the keys forgotten; the count of moves; the moves since those heard of (every key
// away from its home, with the whole order), each a key and where it is ('' for home).
const SHARE = luaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- Places only grow, even where the newest key was forgotten and the clock went back: replicas ask for those after theirs.
local next_score = math.max(now, tonumber(redis.call('HGET', KEYS[4], 'placed') or '0') + 1)
redis.call('HSETNX', KEYS[4], 'began', now)
local moves = tonumber(redis.call('HGET', KEYS[4], 'moves') or '0')
local first_seen = 8 + 2 * tonumber(ARGV[7])
for i = first_seen, #ARGV do
  if redis.call('ZADD', KEYS[1], 'NX', next_score, ARGV[i]) == 1 then next_score = next_score + 1 end
  redis.call('ZADD', KEYS[2], now, ARGV[i])
end
-- A move of a key the fleet no longer keeps (forgotten while the move waited to be sent) is dropped, as the key's was.
for i = 8, first_seen - 1, 2 do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    moves = moves + 1
    if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[5], ARGV[i]) else redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1]) end
    redis.call('ZADD', KEYS[6], moves, ARGV[i])
  end
end
redis.call('HSET', KEYS[4], 'placed', next_score - 1)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[1]) * 1000)
local over = redis.call('ZCARD', KEYS[2]) - #gone - tonumber(ARGV[2])
if over > 0 then
  for _, k in ipairs(redis.call('ZRANGE', KEYS[2], #gone, #gone + over - 1)) do gone[#gone + 1] = k end
end
local count = tonumber(redis.call('HGET', KEYS[4], 'count') or '0')
for i = 1, #gone, 500 do
  local part = { unpack(gone, i, math.min(i + 499, #gone)) }
  redis.call('ZREM', KEYS[1], unpack(part))
  redis.call('ZREM', KEYS[2], unpack(part))
  redis.call('HDEL', KEYS[5], unpack(part))
  redis.call('ZREM', KEYS[6], unpack(part))
  for _, k in ipairs(part) do
    count = count + 1
    redis.call('ZADD', KEYS[3], count, k)
  end
end
local trimmed = tonumber(redis.call('HGET', KEYS[4], 'trimmed') or '0')
local over_listed = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[2])
if over_listed > 0 then
  local dropped = redis.call('ZRANGE', KEYS[3], over_listed - 1, over_listed - 1, 'WITHSCORES')
  trimmed = tonumber(dropped[2])
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over_listed - 1)
end
redis.call('HSET', KEYS[4], 'count', count, 'trimmed', trimmed, 'moves', moves)
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
local heard = tonumber(ARGV[4])
local began = redis.call('HGET', KEYS[4], 'began')
-- A replica with another order (or none), or that missed forgettings no longer listed, takes the whole order.
if ARGV[3] == '' or ARGV[5] ~= began or heard < trimmed then
  return { 1, count, began, redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'), {}, moves, redis.call('HGETALL', KEYS[5]) }
end
local moved, since = {}, redis.call('ZRANGEBYSCORE', KEYS[6], '(' .. ARGV[6], '+inf')
for _, k in ipairs(since) do
  moved[#moved + 1] = k
  moved[#moved + 1] = redis.call('HGET', KEYS[5], k) or ''
end
return { 0, count, began, redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[3], '+inf', 'WITHSCORES'), redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. heard, '+inf'), moves, moved }
`);

/** A model's keys, and how far this replica has heard the fleet's order: which order, the last place it has, the forgettings it knows of. */
interface Shared {
  known: KnownPrefixes;
  began: string;
  /** When it last took the whole order. */
  tookWhole: number;
  lastPlace: number | undefined;
  heard: number;
  /** The count of the fleet's moves it has heard of. */
  movesHeard: number;
}

export class PrefixSharing {
  private readonly models = new Map<string, Shared>();
  private readonly timer: NodeJS.Timeout;
  private sharing = false;

  /** `now`: a clock in ms, for when the whole order is due. */
  constructor(private readonly redis: Redis, private readonly now: () => number = () => performance.now()) {
    this.timer = setInterval(() => void this.share(), SHARE_INTERVAL_MS);
    this.timer.unref();
  }

  /** The known keys of `model`, shared from now on. */
  known(model: string): KnownPrefixes {
    return this.shared(model).known;
  }

  private shared(model: string): Shared {
    let shared = this.models.get(model);
    if (!shared) {
      shared = { known: new KnownPrefixes(), began: '', tookWhole: 0, lastPlace: undefined, heard: 0, movesHeard: 0 };
      this.models.set(model, shared);
    }
    return shared;
  }

  /** Adds a key this replica has not seen to the fleet's order and takes that order, waiting at most PLACE_WAIT_MS. */
  async place(model: string, key: string): Promise<void> {
    const shared = this.exchange(this.shared(model), model, [key]);
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, PLACE_WAIT_MS)));
    // Past the wait (Redis slow or away), the key is placed on what this replica knows, and shared in the background.
    await Promise.race([shared.catch(() => undefined), waited]);
    clearTimeout(timer);
  }

  /** Stops sharing a model no longer in the routing file. */
  forget(model: string): void {
    this.models.delete(model);
  }

  close(): void {
    clearInterval(this.timer);
  }

  /** Sends the keys seen and the moves made, and takes what changed in the fleet's order since this replica last heard. */
  private async exchange(shared: Shared, model: string, seen: string[], moves: [string, string][] = []): Promise<void> {
    const keys = redisKeys.prefixes(model);
    const wantWhole = shared.lastPlace === undefined || this.now() - shared.tookWhole >= WHOLE_EVERY_MS;
    const [whole, count, began, placed, forgotten, movesCount, moved] = (await SHARE.run(
      this.redis,
      [keys.firstSeen, keys.lastSeen, keys.forgotten, keys.forgetting, keys.movedTo, keys.moves],
      [PREFIX_IDLE_MS, MAX_KNOWN_PREFIXES, wantWhole ? '' : shared.lastPlace!, shared.heard, shared.began, shared.movesHeard, moves.length, ...moves.flat(), ...seen],
    )) as [number, number, string, string[], string[], number, string[]];
    const added: [string, number][] = [];
    for (let i = 0; i < placed.length; i += 2) added.push([placed[i], Number(placed[i + 1])]);
    const fleetMoves: [string, string][] = [];
    for (let i = 0; i < moved.length; i += 2) fleetMoves.push([moved[i], moved[i + 1]]);
    shared.known.merge({ whole: whole === 1, added, forgotten, moves: fleetMoves });
    // Replies come in the order asked, each as of its own time: the last one's count and places are the latest.
    if (whole === 1) {
      shared.lastPlace = added.at(-1)?.[1] ?? 0;
      shared.tookWhole = this.now();
    } else if (added.length > 0) shared.lastPlace = Math.max(shared.lastPlace ?? 0, added.at(-1)![1]);
    shared.heard = Number(count);
    shared.movesHeard = Number(movesCount);
    shared.began = began;
  }

  private async share(): Promise<void> {
    if (this.sharing) return;
    this.sharing = true;
    try {
      for (const [model, shared] of this.models) {
        const seen = shared.known.takeUnshared();
        const moves = shared.known.takeUnsharedMoves();
        try {
          await this.exchange(shared, model, seen, moves);
        } catch {
          // Redis is away: keep what this replica knows, and send what it saw and moved next time.
          for (const key of seen) shared.known.saw(key);
          shared.known.restoreMoves(moves);
        }
        shared.known.trim();
      }
    } finally {
      this.sharing = false;
    }
  }
}
