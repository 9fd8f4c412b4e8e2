// Parley keeps its books in Redis. A Redis with a memory limit whose policy
// is to evict keys when it is full would drop some of them without a word:
// under a `volatile-*` policy the keys with a time to live (rate windows, the
// fleet's slot leases, batches' lines and results, the days' usage totals),
// under an `allkeys-*` one balances, credit holds and the tickets that make a
// settlement count once as well. With `noeviction` a full Redis refuses
// writes instead, and Parley fails closed (503) until there is room. Managed
// Redis services often default to `volatile-lru`, so `parley serve` checks
// each primary as it starts, and refuses one that would evict.
import type { Cluster } from 'ioredis';
import { ConfigError } from '../config-error.js';
import type { Redis } from './connection.js';
import { isCluster } from './shared-redis.js';

/** Refuses a Redis any of whose primaries has a memory limit and evicts keys to keep to it. */
export async function checkEvictionPolicy(redis: Redis): Promise<void> {
  const primaries = isCluster(redis) ? (redis as unknown as Cluster).nodes('master') : [redis];
  for (const primary of primaries) {
    const memory = await primary.info('memory');
    const policy = /^maxmemory_policy:(\S+)/m.exec(memory)?.[1];
    const limit = Number(/^maxmemory:(\d+)/m.exec(memory)?.[1] ?? 0);
    // No limit (0): nothing is evicted, whatever the policy. One whose INFO does not name its policy cannot be checked.
    if (policy === undefined || policy === 'noeviction' || limit === 0) continue;
    const where = isCluster(redis) ? ` (the primary at ${primary.options.host}:${primary.options.port})` : '';
    throw new ConfigError(
      `this Redis${where} evicts keys when it reaches its memory limit (maxmemory-policy ${policy}), which would drop Parley's rate windows, slot leases and batches, or its balances and holds: set maxmemory-policy to noeviction (CONFIG SET maxmemory-policy noeviction, or the managed service's parameter), then start again`,
    );
  }
}
