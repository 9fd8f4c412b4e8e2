// An endpoint's `maxConcurrent` is what the upstream takes from the whole
// fleet, so the replicas take its slots from one count in Redis: a lease per
// request in flight, in a sorted set per endpoint (score: when it lapses,
// renewed while the request runs, so that a replica that dies gives its
// slots back within LEASE_MS). A request that finds the fleet full waits in
// its replica's queue, which asks again every POLL_MS and at once when a
// slot of its own frees; a default or priority request that waits says so
// in Redis, so that every replica's flex requests stay behind it, and
// priority stays ahead of default, fleet-wide. Flex leases are kept apart
// from the rest, with the most other-tier leases held at once per step of
// PEAK_STEP_MS, for the room flex leaves (EndpointState's mayAdmit).
//
// While Redis's latest admission for an endpoint, at most REUSE_MS ago,
// found room to spare and no one waiting, a lease this replica releases
// there passes to its next request of the lease's kind, unasked; once that
// word is older, or an admission found the fleet full or someone waiting,
// leases go back. So a replica's steady flow asks Redis about once per
// REUSE_MS, not once per request, and no rule gets more slack than a
// waiter's poll already has: the count in Redis never grows by a reuse,
// and Redis is asked again within REUSE_MS of anyone starting to wait.
// Against asking at every request, `node bench/fast-paths.mjs
// reused-leases 6 4 1` gave 1.42 times the light-load (one connection)
// whole requests/s (470 against 620 µs of main-thread CPU a request) and
// `... 6 4 32` 1.19 times at 32 connections (2026-11-28, under the rule
// before, which passes on alike where replies are that quick). The word is the
// endpoint's, not each lease's own grant: a lease passed on only within
// REUSE_MS of its own grant never passes behind a GPU, whose replies take
// longer. Behind a first byte of 10 to 30 ms at 16 connections, whole, a
// request made 0.2 admissions (script calls) where it had made 0.73, and
// `node bench/revision-ab.mjs f53c579 whole 16 6 6 20 10` gave 1.04 times
// the requests/s and 714 against 775 µs of main-thread CPU a request
// (streamed, 16 and 32 connections: 1.01 and 1.04, within a few µs);
// first byte at once, 32 connections (`... whole 32 6 4`): 1.11, 275
// against 305 µs (2026-11-28).
//
// Admissions asked for within one turn of the event loop go in one script
// call, applied in order (as holds do: billing/hold-queue.ts). Against one
// call per admission, after the hold (88b18b7), `node bench/revision-ab.mjs
// 88b18b7 whole|streamed 32 8 4` gave this 1.11 times the whole and 1.14
// times the streamed requests/s (2026-11-26), where asking beside the hold
// alone had given 0.92 whole. Releases, off the reply's path, go one ZREM
// per set of leases a turn: against one per release, `node
// bench/fast-paths.mjs batched-releases` gave 1.10 and 1.23 times the whole
// requests/s at 32 connections in two runs (2026-11-26).
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ServiceTier } from '../protocol/service-tier.js';
import { LUA_NOW_MS, luaArgs, luaConstants, luaJson, luaScript } from '../redis/lua-script.js';
import { BatchKeys, LUA_EACH_ITEM } from '../redis/batch-keys.js';
import { redisKeys } from '../redis/keys.js';
import { TurnBatches } from '../redis/turn-batches.js';
import { PEAK_STEP_MS, PEAK_STEPS, POLL_MS, flexLimit } from './admission-rule.js';

const LEASE_MS = 30_000;
const RENEW_MS = 5_000;
/** How long after Redis's word that an endpoint has room and no one waiting its leases may pass from request to request on this replica: no longer than a waiter takes to look again. */
const REUSE_MS = POLL_MS;
/** A waiting mark not refreshed for this long is dropped: its replica stopped waiting, or died. */
const WAITING_MARK_MS = 10 * POLL_MS;

const ACQUIRE_ARGS = luaArgs(['lease', 'tier', 'max_concurrent', 'flex_limit', 'keep_room', 'lease_ms', 'mark_id', 'mark_ms', 'peak_step_ms', 'peak_steps'] as const);

// ARGV[1]: the admissions (each_item), each with its endpoint's five keys
// (flex leases, other leases, priority waiters, default waiters, the most
// other-tier leases held at once per step) and ACQUIRE_ARGS.
// Replies, per admission: NOT_TAKEN (a default or priority request is then
// marked waiting), TAKEN, or REUSABLE: taken with room left and no one
// waiting, so that the lease may pass to this replica's next request. The
// rule is EndpointState's mayAdmit, for the fleet: flex leaves room for the
// most other requests held lately, plus one.
const GRANT = { NOT_TAKEN: 0, TAKEN: 1, REUSABLE: 2 } as const;
const ACQUIRE = luaScript(`
${LUA_NOW_MS}
${luaConstants(GRANT)}
${ACQUIRE_ARGS.lua('S')}
${LUA_EACH_ITEM}
-- One admission: K, its endpoint's keys; A, its ACQUIRE_ARGS.
local function acquire(K, A)
  redis.call('ZREMRANGEBYSCORE', K[1], '-inf', now_ms)
  redis.call('ZREMRANGEBYSCORE', K[2], '-inf', now_ms)
  redis.call('ZREMRANGEBYSCORE', K[3], '-inf', now_ms - tonumber(A[S.mark_ms]))
  redis.call('ZREMRANGEBYSCORE', K[4], '-inf', now_ms - tonumber(A[S.mark_ms]))
  local tier = A[S.tier]
  local flex, other = redis.call('ZCARD', K[1]), redis.call('ZCARD', K[2])
  local step = math.floor(now_ms / tonumber(A[S.peak_step_ms]))
  local admit
  if tier == 'flex' then
    local peak = 0
    local fields = {}
    for s = step - tonumber(A[S.peak_steps]) + 1, step do fields[#fields + 1] = tostring(s) end
    for _, v in ipairs(redis.call('HMGET', K[5], unpack(fields))) do
      if v then peak = math.max(peak, tonumber(v)) end
    end
    local room = (peak > 0 and tonumber(A[S.keep_room]) == 1) and peak + 1 or 0
    admit = redis.call('ZCARD', K[3]) + redis.call('ZCARD', K[4]) == 0
      and flex + other < tonumber(A[S.flex_limit]) and flex + room < tonumber(A[S.max_concurrent])
  else
    local ahead = tier == 'default' and redis.call('ZCARD', K[3]) or 0
    admit = ahead == 0 and flex + other < tonumber(A[S.max_concurrent])
  end
  local mark = tier == 'priority' and K[3] or K[4]
  if not admit then
    if tier ~= 'flex' then redis.call('ZADD', mark, now_ms, A[S.mark_id]) end
    return NOT_TAKEN
  end
  if tier == 'flex' then
    redis.call('ZADD', K[1], now_ms + tonumber(A[S.lease_ms]), A[S.lease])
  else
    redis.call('ZREM', mark, A[S.mark_id])
    redis.call('ZADD', K[2], now_ms + tonumber(A[S.lease_ms]), A[S.lease])
    local held = tonumber(redis.call('HGET', K[5], tostring(step)) or '0')
    if other + 1 > held then redis.call('HSET', K[5], tostring(step), other + 1) end
    redis.call('PEXPIRE', K[5], 2 * tonumber(A[S.peak_steps]) * tonumber(A[S.peak_step_ms]))
  end
  redis.call('PEXPIRE', K[1], A[S.lease_ms])
  redis.call('PEXPIRE', K[2], A[S.lease_ms])
  local waiting = redis.call('ZCARD', K[3]) + redis.call('ZCARD', K[4])
  if waiting == 0 and flex + other + 1 < tonumber(A[S.max_concurrent]) then return REUSABLE end
  return TAKEN
end
local reply = {}
each_item(1, 5, 0, function(K, A) reply[#reply + 1] = acquire(K, A) end)
return reply
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
const kindOf = (lease: string) => (lease.startsWith(FLEX) ? FLEX : OTHER);
const leasesOf = (endpoint: string, lease: string) => (kindOf(lease) === FLEX ? redisKeys.endpointSlots(endpoint).flexLeases : redisKeys.endpointSlots(endpoint).otherLeases);

interface Asking {
  endpoint: string;
  lease: string;
  tier: ServiceTier;
  limits: SlotLimits;
  taken: (lease: string | undefined) => void;
  failed: (err: unknown) => void;
}

/** An endpoint's slots: how many, and whether flex may fill them all (admission-rule.ts). */
export interface SlotLimits {
  maxConcurrent: number;
  flexFillsAll: boolean;
}

/** A lease of an endpoint's slot. */
interface Lease {
  endpoint: string;
  lease: string;
}

export class FleetSlots {
  private readonly replica = randomUUID();
  private readonly batches: TurnBatches<Asking>;
  private readonly releases: TurnBatches<Lease>;
  /** Releases Redis did not take (it was away): sent again with the next renewal, so a slot comes back within RENEW_MS of Redis, not LEASE_MS. */
  private unreleased: Lease[] = [];
  /** Leases this replica holds, by endpoint: in use or spare. */
  private readonly held = new Map<string, Set<string>>();
  /** By endpoint: until when a lease released there may pass on (REUSE_MS after Redis's latest admission there found room and no one waiting; 0 once one did not). */
  private readonly passOnUntil = new Map<string, number>();
  /** Released leases this replica may hand to its next request, by endpoint and kind (FLEX, OTHER), the latest last. */
  private readonly spares = new Map<string, Record<typeof FLEX | typeof OTHER, string[]>>();
  private sweep: NodeJS.Timeout | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly redis: Redis) {
    this.batches = new TurnBatches(redis, (part) => void this.admit(part), (a) => redisKeys.endpointSlots(a.endpoint).flexLeases);
    this.releases = new TurnBatches(redis, (part) => void this.giveBack(part), (r) => leasesOf(r.endpoint, r.lease));
    this.timer = setInterval(() => void this.renew(), RENEW_MS);
    this.timer.unref();
  }

  /** Takes one of `endpoint`'s slots for `tier`; resolves to its lease, or undefined when the fleet has none free for it. */
  acquire(endpoint: string, tier: ServiceTier, limits: SlotLimits): Promise<string | undefined> {
    const kind = tier === 'flex' ? FLEX : OTHER;
    const spare = this.spares.get(endpoint)?.[kind].pop();
    if (spare && this.mayPassOn(endpoint)) return Promise.resolve(spare);
    if (spare) this.drop(endpoint, spare);
    const lease = `${kind}${randomUUID()}`;
    return new Promise((taken, failed) => this.batches.add({ endpoint, lease, tier, limits, taken, failed }));
  }

  /** One turn's admissions, in one script call. */
  private async admit(part: Asking[]): Promise<void> {
    const keys = new BatchKeys();
    const items = part.map((a) => {
      const k = redisKeys.endpointSlots(a.endpoint);
      const at = keys.group(k.flexLeases, () => [k.flexLeases, k.otherLeases, k.priorityWaiting, k.defaultWaiting, k.otherPeaks]);
      const args = ACQUIRE_ARGS.list({
        lease: a.lease, tier: a.tier, max_concurrent: a.limits.maxConcurrent, flex_limit: flexLimit(a.limits.maxConcurrent, a.limits.flexFillsAll), keep_room: a.limits.flexFillsAll ? 0 : 1,
        lease_ms: LEASE_MS, mark_id: this.replica, mark_ms: WAITING_MARK_MS, peak_step_ms: PEAK_STEP_MS, peak_steps: PEAK_STEPS,
      });
      return [at, ...args];
    });
    let granted: number[];
    try {
      granted = (await ACQUIRE.run(this.redis, keys.list, [luaJson(items)])) as number[];
    } catch (err) {
      for (const a of part) a.failed(err);
      return;
    }
    const reusableUntil = performance.now() + REUSE_MS;
    part.forEach((a, i) => {
      const grant = Number(granted[i]);
      this.passOnUntil.set(a.endpoint, grant === GRANT.REUSABLE ? reusableUntil : 0);
      if (grant === GRANT.NOT_TAKEN) return a.taken(undefined);
      let leases = this.held.get(a.endpoint);
      if (!leases) this.held.set(a.endpoint, (leases = new Set()));
      leases.add(a.lease);
      a.taken(a.lease);
    });
  }

  /** Whether a lease released at `endpoint` may still pass on at `at`. */
  private mayPassOn(endpoint: string, at = performance.now()): boolean {
    return (this.passOnUntil.get(endpoint) ?? 0) > at;
  }

  /** Gives a lease back, or keeps it for the next request while it may pass on; off the request's path. */
  release(endpoint: string, lease: string): void {
    if (!this.mayPassOn(endpoint)) return this.drop(endpoint, lease);
    let spares = this.spares.get(endpoint);
    if (!spares) this.spares.set(endpoint, (spares = { [FLEX]: [], [OTHER]: [] }));
    spares[kindOf(lease)].push(lease);
    this.sweep ??= setTimeout(() => this.sweepSpares(), REUSE_MS).unref();
  }

  private drop(endpoint: string, lease: string): void {
    this.held.get(endpoint)?.delete(lease);
    this.releases.add({ endpoint, lease });
  }

  /** Takes out of the spares, and out of what this replica holds, those of endpoints whose time to pass on ends by `until`. */
  private takeSpares(until: number): Lease[] {
    const taken: Lease[] = [];
    for (const [endpoint, kinds] of this.spares) {
      if (this.mayPassOn(endpoint, until)) continue;
      for (const kind of [FLEX, OTHER] as const) {
        for (const lease of kinds[kind]) {
          this.held.get(endpoint)?.delete(lease);
          taken.push({ endpoint, lease });
        }
        kinds[kind] = [];
      }
    }
    return taken;
  }

  /** Gives back the spares that may no longer pass on; looks again while any are kept. */
  private sweepSpares(): void {
    this.sweep = undefined;
    for (const lapsed of this.takeSpares(performance.now())) this.releases.add(lapsed);
    const kept = [...this.spares.values()].some((kinds) => kinds[FLEX].length + kinds[OTHER].length > 0);
    if (kept) this.sweep = setTimeout(() => this.sweepSpares(), REUSE_MS).unref();
  }

  /** Releases: one ZREM per set of leases; those Redis does not take wait for the next renewal. */
  private giveBack(part: Lease[]): Promise<unknown>[] {
    const bySet = new Map<string, Lease[]>();
    for (const released of part) {
      const set = leasesOf(released.endpoint, released.lease);
      const leases = bySet.get(set);
      if (leases) leases.push(released);
      else bySet.set(set, [released]);
    }
    return [...bySet].map(([set, leases]) => this.redis.zrem(set, ...leases.map((l) => l.lease)).catch(() => this.unreleased.push(...leases)));
  }

  /** Stops renewing, and gives the spares back at once. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    clearTimeout(this.sweep);
    await Promise.all(this.giveBack(this.takeSpares(Infinity)));
  }

  private async renew(): Promise<void> {
    if (this.unreleased.length > 0) await Promise.all(this.giveBack(this.unreleased.splice(0)));
    for (const [endpoint, leases] of this.held) {
      for (const kind of [FLEX, OTHER]) {
        const ofKind = [...leases].filter((l) => l.startsWith(kind));
        if (ofKind.length > 0) await RENEW.run(this.redis, [leasesOf(endpoint, ofKind[0])], [LEASE_MS, ...ofKind]).catch(() => undefined);
      }
    }
  }
}
