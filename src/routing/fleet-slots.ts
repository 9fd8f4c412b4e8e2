// An endpoint's `maxConcurrent` is what the upstream takes from the whole
// fleet, so the replicas take its slots from one count in Redis: a lease per
// request in flight, in a sorted set per endpoint (score: when it lapses,
// renewed while the request runs, so that a replica that dies gives its
// slots back within LEASE_MS). A request that finds the fleet full waits in
// its replica's queue, which asks again every POLL_MS and at once when a
// slot of its own frees; a default or priority request that waits says so
// in Redis, so that every replica's flex requests stay behind it, and
// priority stays ahead of default, fleet-wide.
//
// Coordination costs one script call per admission and one per release,
// the release off the reply's path (bench/service-tiers.mjs measures it).
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ServiceTier } from '../protocol/service-tier.js';
import { LUA_NOW_MS, luaScript } from '../redis/lua-script.js';
import { redisKeys } from '../redis/keys.js';

export const POLL_MS = 20;
const LEASE_MS = 30_000;
const RENEW_MS = 5_000;
/** A waiting mark not refreshed for this long is dropped: its replica stopped waiting, or died. */
const WAITING_MARK_MS = 10 * POLL_MS;

// KEYS: leases, priority waiters, default waiters. ARGV: lease, tier, the tier's limit, lease ms, waiting mark id,
// mark ms. Returns 1 with the lease taken, 0 without (a default or priority request is then marked waiting).
const ACQUIRE = luaScript(`
${LUA_NOW_MS}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms - tonumber(ARGV[6]))
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms - tonumber(ARGV[6]))
local tier = ARGV[2]
local ahead = 0
if tier == 'default' then ahead = redis.call('ZCARD', KEYS[2])
elseif tier == 'flex' then ahead = redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) end
local mark = tier == 'priority' and KEYS[2] or KEYS[3]
if ahead > 0 or redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  if tier ~= 'flex' then redis.call('ZADD', mark, now_ms, ARGV[5]) end
  return 0
end
if tier ~= 'flex' then redis.call('ZREM', mark, ARGV[5]) end
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[4]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`);

// KEYS: leases. ARGV: lease ms, then the leases to keep.
const RENEW = luaScript(`
${LUA_NOW_MS}
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now_ms + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
`);

export class FleetSlots {
  private readonly replica = randomUUID();
  /** Leases this replica holds, by endpoint. */
  private readonly held = new Map<string, Set<string>>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly redis: Redis) {
    this.timer = setInterval(() => void this.renew(), RENEW_MS);
    this.timer.unref();
  }

  /** Takes one of `endpoint`'s `limit` slots for `tier`; resolves to its lease, or undefined when the fleet has none free. */
  async acquire(endpoint: string, tier: ServiceTier, limit: number): Promise<string | undefined> {
    const keys = redisKeys.endpointSlots(endpoint);
    const lease = randomUUID();
    const taken = await ACQUIRE.run(this.redis, [keys.leases, keys.priorityWaiting, keys.defaultWaiting], [lease, tier, limit, LEASE_MS, `${this.replica}`, WAITING_MARK_MS]);
    if (Number(taken) !== 1) return undefined;
    let leases = this.held.get(endpoint);
    if (!leases) this.held.set(endpoint, (leases = new Set()));
    leases.add(lease);
    return lease;
  }

  /** Gives a lease back; off the request's path, and a lease lost with Redis lapses by itself. */
  release(endpoint: string, lease: string): void {
    this.held.get(endpoint)?.delete(lease);
    void this.redis.zrem(redisKeys.endpointSlots(endpoint).leases, lease).catch(() => undefined);
  }

  close(): void {
    clearInterval(this.timer);
  }

  private async renew(): Promise<void> {
    for (const [endpoint, leases] of this.held) {
      if (leases.size === 0) continue;
      await RENEW.run(this.redis, [redisKeys.endpointSlots(endpoint).leases], [LEASE_MS, ...leases]).catch(() => undefined);
    }
  }
}
