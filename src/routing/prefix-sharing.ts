// Shares each model's known prefixes through Redis, in the background: every
// SHARE_INTERVAL_MS a replica sends the prefixes it saw and takes back the
// fleet's list in first-seen order, so that every replica computes the same
// placements. Nothing on the request path waits for it; while Redis is away
// each replica goes on with what it knows.
import type { Redis } from 'ioredis';
import { luaScript } from '../redis/lua-script.js';
import { redisKeys } from '../redis/keys.js';
import { KnownPrefixes, MAX_KNOWN_PREFIXES, PREFIX_IDLE_MS } from './known-prefixes.js';

export const SHARE_INTERVAL_MS = 200;

// KEYS: first seen (score: ms), last seen (score: ms). ARGV: now, idle ms, most kept, then each prefix seen and
// when its replica first saw it. Returns the prefixes in first-seen order (ties by name, the same everywhere).
const SHARE = luaScript(`
local now = tonumber(ARGV[1])
for i = 4, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], 'NX', ARGV[i + 1], ARGV[i])
  redis.call('ZADD', KEYS[2], now, ARGV[i])
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
local over = redis.call('ZCARD', KEYS[2]) - #gone - tonumber(ARGV[3])
if over > 0 then
  for _, k in ipairs(redis.call('ZRANGE', KEYS[2], #gone, #gone + over - 1)) do gone[#gone + 1] = k end
end
for i = 1, #gone, 500 do
  local part = { unpack(gone, i, math.min(i + 499, #gone)) }
  redis.call('ZREM', KEYS[1], unpack(part))
  redis.call('ZREM', KEYS[2], unpack(part))
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
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

  /** The known prefixes of `model`, shared from now on. */
  known(model: string): KnownPrefixes {
    let known = this.models.get(model);
    if (!known) {
      known = new KnownPrefixes();
      this.models.set(model, known);
    }
    return known;
  }

  /** Stops sharing a model no longer in the routing file. */
  forget(model: string): void {
    this.models.delete(model);
  }

  close(): void {
    clearInterval(this.timer);
  }

  private async share(): Promise<void> {
    if (this.sharing) return;
    this.sharing = true;
    try {
      for (const [model, known] of this.models) {
        const seen = known.takeUnshared();
        try {
          const keys = redisKeys.prefixes(model);
          const order = await SHARE.run(this.redis, [keys.firstSeen, keys.lastSeen], [Date.now(), PREFIX_IDLE_MS, MAX_KNOWN_PREFIXES, ...seen.flat()]);
          known.adopt(order as string[]);
        } catch {
          // Redis is away: keep what this replica knows, and send what it saw next time.
          for (const [key] of seen) known.saw(key);
        }
        known.trim();
      }
    } finally {
      this.sharing = false;
    }
  }
}
