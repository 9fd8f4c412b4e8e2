// An endpoint's `maxConcurrent` is what the upstream takes from the whole
// fleet, so the replicas take its slots from one count in Redis: a lease per
// request in flight, in a sorted set per endpoint (score: when it lapses,
// renewed while the request runs, so that a replica that dies gives its
// slots back within LEASE_MS). A request that finds the fleet full waits in
// its replica's queue, which asks again every POLL_MS and at once when a
// slot of its own frees; a default or priority request that waits says so
// in Redis, so that every replica's flex requests stay behind it, and
// priority stays ahead of default, fleet-wide. Flex leases are kept apart
// from the rest, with the most other-tier leases held at once per second,
// for the room flex leaves (EndpointState's mayAdmit).
//
// Coordination costs one script call per admission and one per release,
// the release off the reply's path (bench/service-tiers.mjs measures it).
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ServiceTier } from '../protocol/service-tier.js';
import { LUA_NOW_MS, luaScript } from '../redis/lua-script.js';
import { redisKeys } from '../redis/keys.js';
import { PEAK_WINDOW_S, POLL_MS, flexLimit } from './admission-rule.js';

const LEASE_MS = 30_000;
const RENEW_MS = 5_000;
/** A waiting mark not refreshed for this long is dropped: its replica stopped waiting, or died. */
const WAITING_MARK_MS = 10 * POLL_MS;

// KEYS: flex leases, other leases, priority waiters, default waiters, the most other-tier leases held at once
// per second. ARGV: lease, tier, maxConcurrent, flex's limit, lease ms, waiting mark id, mark ms, peak window s.
// Returns 1 with the lease taken, 0 without (a default or priority request is then marked waiting). The rule
// is EndpointState's mayAdmit, for the fleet: flex leaves room for the most other requests held lately, plus one.
const ACQUIRE = luaScript(`
${LUA_NOW_MS}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms - tonumber(ARGV[7]))
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms - tonumber(ARGV[7]))
local tier = ARGV[2]
local flex, other = redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])
local second = math.floor(now_ms / 1000)
local admit
if tier == 'flex' then
  local peak = 0
  local window = tonumber(ARGV[8])
  local fields = {}
  for s = second - window + 1, second do fields[#fields + 1] = tostring(s) end
  for _, v in ipairs(redis.call('HMGET', KEYS[5], unpack(fields))) do
    if v then peak = math.max(peak, tonumber(v)) end
  end
  local room = peak > 0 and peak + 1 or 0
  admit = redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4]) == 0
    and flex + other < tonumber(ARGV[4]) and flex + room < tonumber(ARGV[3])
else
  local ahead = tier == 'default' and redis.call('ZCARD', KEYS[3]) or 0
  admit = ahead == 0 and flex + other < tonumber(ARGV[3])
end
local mark = tier == 'priority' and KEYS[3] or KEYS[4]
if not admit then
  if tier ~= 'flex' then redis.call('ZADD', mark, now_ms, ARGV[6]) end
  return 0
end
if tier == 'flex' then
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[5]), ARGV[1])
else
  redis.call('ZREM', mark, ARGV[6])
  redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[5]), ARGV[1])
  local held = tonumber(redis.call('HGET', KEYS[5], tostring(second)) or '0')
  if other + 1 > held then redis.call('HSET', KEYS[5], tostring(second), other + 1) end
  redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[8]) * 2000)
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
`);

// KEYS: leases. ARGV: lease ms, then the leases to keep.
const RENEW = luaScript(`
${LUA_NOW_MS}
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now_ms + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
`);

/** Lease ids say their kind, so that a release finds their set. */
const FLEX = 'flex:';
const OTHER = 'other:';
const leasesOf = (endpoint: string, lease: string) => (lease.startsWith(FLEX) ? redisKeys.endpointSlots(endpoint).flexLeases : redisKeys.endpointSlots(endpoint).otherLeases);

export class FleetSlots {
  private readonly replica = randomUUID();
  /** Leases this replica holds, by endpoint. */
  private readonly held = new Map<string, Set<string>>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly redis: Redis) {
    this.timer = setInterval(() => void this.renew(), RENEW_MS);
    this.timer.unref();
  }

  /** Takes one of `endpoint`'s slots for `tier`; resolves to its lease, or undefined when the fleet has none free for it. */
  async acquire(endpoint: string, tier: ServiceTier, maxConcurrent: number): Promise<string | undefined> {
    const keys = redisKeys.endpointSlots(endpoint);
    const lease = `${tier === 'flex' ? FLEX : OTHER}${randomUUID()}`;
    const args = [lease, tier, maxConcurrent, flexLimit(maxConcurrent), LEASE_MS, this.replica, WAITING_MARK_MS, PEAK_WINDOW_S];
    const taken = await ACQUIRE.run(this.redis, [keys.flexLeases, keys.otherLeases, keys.priorityWaiting, keys.defaultWaiting, keys.otherPeaks], args);
    if (Number(taken) !== 1) return undefined;
    let leases = this.held.get(endpoint);
    if (!leases) this.held.set(endpoint, (leases = new Set()));
    leases.add(lease);
    return lease;
  }

  /** Gives a lease back; off the request's path, and a lease lost with Redis lapses by itself. */
  release(endpoint: string, lease: string): void {
    this.held.get(endpoint)?.delete(lease);
    void this.redis.zrem(leasesOf(endpoint, lease), lease).catch(() => undefined);
  }

  close(): void {
    clearInterval(this.timer);
  }

  private async renew(): Promise<void> {
    for (const [endpoint, leases] of this.held) {
      for (const kind of [FLEX, OTHER]) {
        const ofKind = [...leases].filter((l) => l.startsWith(kind));
        if (ofKind.length > 0) await RENEW.run(this.redis, [leasesOf(endpoint, ofKind[0])], [LEASE_MS, ...ofKind]).catch(() => undefined);
      }
    }
  }
}
