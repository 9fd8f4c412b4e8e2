// How many replicas a write must reach before it counts, for one connection,
// and how many each primary has now: Redis replicates asynchronously, and a
// primary that fails over loses what its replicas had not yet taken. The
// scripts that move money (lua-script.ts: runDurably) WAIT for these.
import calculateSlot from 'cluster-key-slot';
import type { Cluster } from 'ioredis';
import { ConfigError } from '../config-error.js';
import type { Redis } from 'ioredis';
import { isCluster, type SharedRedis } from './shared-redis.js';

/**
 * How many replicas must have a hold or a settlement before it counts
 * (WAIT): Redis replicates asynchronously, and a primary that fails over
 * loses what its replicas had not yet taken. REDIS_WAIT_REPLICAS, by default
 * 1 behind Sentinel or on a cluster, 0 on one server; no more are waited for
 * than the primary has (a primary without replicas has nothing to fail over
 * to, and one just promoted has none until its old primary rejoins).
 */
export interface Durability {
  replicas: number;
  timeoutMs: number;
  /** The replicas each primary last said it has (ROLE) and when, by its host:port on a cluster ('' off one); forgotten at each reconnection. */
  replicasSeen: Map<string, { count: Promise<number>; at: number }>;
}

const durabilities = new WeakMap<Redis, Durability>();

/** A durable write reached fewer replicas than its connection asks for in time: it may yet be lost. */
export class NotReplicated extends Error {}

export function durabilityOf(redis: Redis): Durability {
  return durabilities.get(redis) ?? { replicas: 0, timeoutMs: 0, replicasSeen: new Map() };
}

function durabilityFor(shared: SharedRedis): Durability {
  const replicas = process.env.REDIS_WAIT_REPLICAS ?? (shared.kind === 'server' ? '0' : '1');
  const timeoutMs = process.env.REDIS_WAIT_TIMEOUT_MS ?? '250';
  if (!/^\d+$/.test(replicas) || !/^\d+$/.test(timeoutMs)) throw new ConfigError('REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT_MS are whole numbers');
  return { replicas: Number(replicas), timeoutMs: Math.max(1, Number(timeoutMs)), replicasSeen: new Map() };
}

/** Sets how many replicas `redis`'s durable writes wait for, from the environment and the kind of Redis. */
export function trackReplication(redis: Redis, shared: SharedRedis): void {
  const durability = durabilityFor(shared);
  durabilities.set(redis, durability);
  // Behind Sentinel a reconnection may be to a new primary, with replicas of its own.
  redis.on('ready', () => durability.replicasSeen.clear());
}

/** How many replicas a ROLE reply lists: a primary's third element (a replica's is its primary's port). */
const replicasIn = (role: unknown) => {
  const listed = (role as unknown[])[2];
  return Array.isArray(listed) ? listed.length : 0;
};

/** Asks the primary that serves `key` how many replicas it has. */
async function replicasOn(redis: Redis, key: string): Promise<number> {
  const [[existsErr], [roleErr, role]] = (await redis.pipeline().exists(key).role().exec())!;
  if (existsErr || roleErr) throw existsErr ?? roleErr;
  return replicasIn(role);
}

// How long a primary's replica count is taken as it was told; then asked again, in the background.
const REPLICAS_RECHECK_MS = 1_000;

/**
 * The replicas of the primary that serves `key`, as it last said (ROLE):
 * asked before the first write to it (WAIT for a replica it lacks would hold
 * its connection for the whole timeout), again in the background once a
 * second, and at once with `now`.
 */
export function replicasKnown(redis: Redis, key: string, now = false): Promise<number> {
  const { replicasSeen } = durabilityOf(redis);
  const primary = isCluster(redis) ? ((redis as unknown as Cluster).slots[calculateSlot(key)]?.[0] ?? '') : '';
  const seen = replicasSeen.get(primary);
  if (seen && !now && Date.now() - seen.at < REPLICAS_RECHECK_MS) return seen.count;
  const asked = replicasOn(redis, key);
  const entry = { count: asked, at: Date.now() };
  replicasSeen.set(primary, entry);
  asked.catch(() => replicasSeen.get(primary) === entry && replicasSeen.delete(primary));
  // A stale count serves while a background recheck is out; the first answer is awaited.
  return seen && !now ? seen.count : asked;
}
