// Shares each model's affinity keys through Redis, so that every replica
// places every key alike. Redis orders the keys by when it first heard of
// each (its own clock, strictly increasing), so the order is one for the
// whole fleet and a key arriving later never lands before one placed
// already. In the background, every SHARE_INTERVAL_MS, a replica sends the
// keys it saw and takes back the fleet's order. A key this replica has
// never seen waits one round trip (at most PLACE_WAIT_MS) to be added to the
// fleet's order before it is placed, so that a new tenant or session gets
// the same home on every replica from its first request; known keys never
// wait. While Redis is away each replica goes on with what it knows.
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

// KEYS: first seen, last seen (scores: Redis time in µs). ARGV: idle ms, most kept, then each key seen.
// Returns the keys in first-seen order.
const SHARE = luaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local next_score = math.max(now, (tonumber(newest[2]) or 0) + 1)
for i = 3, #ARGV do
  if redis.call('ZADD', KEYS[1], 'NX', next_score, ARGV[i]) == 1 then next_score = next_score + 1 end
  redis.call('ZADD', KEYS[2], now, ARGV[i])
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[1]) * 1000)
local over = redis.call('ZCARD', KEYS[2]) - #gone - tonumber(ARGV[2])
if over > 0 then
  for _, k in ipairs(redis.call('ZRANGE', KEYS[2], #gone, #gone + over - 1)) do gone[#gone + 1] = k end
end
for i = 1, #gone, 500 do
  local part = { unpack(gone, i, math.min(i + 499, #gone)) }
  redis.call('ZREM', KEYS[1], unpack(part))
  redis.call('ZREM', KEYS[2], unpack(part))
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return redis.call('ZRANGE', KEYS[1], 0, -1)
`);

export class PrefixSharing {
  private readonly models = new Map<string, KnownPrefixes>();
  private readonly timer: NodeJS.Timeout;
  private sharing = false;

  constructor(private readonly redis: Redis) {
    this.timer = setInterval(() => void this.share(), SHARE_INTERVAL_MS);
    this.timer.unref();
  }

  /** The known keys of `model`, shared from now on. */
  known(model: string): KnownPrefixes {
    let known = this.models.get(model);
    if (!known) {
      known = new KnownPrefixes();
      this.models.set(model, known);
    }
    return known;
  }

  /** Adds a key this replica has not seen to the fleet's order and takes that order, waiting at most PLACE_WAIT_MS. */
  async place(model: string, key: string): Promise<void> {
    const known = this.known(model);
    const shared = this.exchange(model, [key]).then((order) => known.adopt(order));
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

  private async exchange(model: string, seen: string[]): Promise<string[]> {
    const keys = redisKeys.prefixes(model);
    return (await SHARE.run(this.redis, [keys.firstSeen, keys.lastSeen], [PREFIX_IDLE_MS, MAX_KNOWN_PREFIXES, ...seen])) as string[];
  }

  private async share(): Promise<void> {
    if (this.sharing) return;
    this.sharing = true;
    try {
      for (const [model, known] of this.models) {
        const seen = known.takeUnshared();
        try {
          known.adopt(await this.exchange(model, seen));
        } catch {
          // Redis is away: keep what this replica knows, and send what it saw next time.
          for (const key of seen) known.saw(key);
        }
        known.trim();
      }
    } finally {
      this.sharing = false;
    }
  }
}
