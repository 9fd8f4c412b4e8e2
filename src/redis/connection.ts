// The one connection to the shared state: one Redis server (redis:// or
// rediss://), a primary found through Sentinel, or a Redis Cluster. Parley
// fails closed: a command that cannot reach Redis fails at once (no offline
// queue, no silent retries), so the request that needed it gets a 503
// instead of free service or a hang.
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { ConfigError } from '../config-error.js';
import { durabilityOf, trackReplication } from './replication.js';
import { isCluster, type SharedRedis } from './shared-redis.js';

// Every module types the connection as ioredis's Redis: a Cluster answers the same commands.
export type { Redis };

/**
 * TLS for a rediss:// URL, or for Sentinel and Cluster with REDIS_TLS=1: the
 * system's certificate authorities, or those in REDIS_CA_FILE (a managed
 * Redis whose certificate a private CA signed).
 */
function tls(wanted: boolean): ConnectionOptions | undefined {
  if (!wanted) return undefined;
  const caFile = process.env.REDIS_CA_FILE;
  return caFile ? { ca: readFileSync(caFile) } : {};
}

// A write refused by a primary that was demoted under it: reconnect, and find the new one.
const reconnectOnError = (err: Error) => err.message.startsWith('READONLY');

/**
 * How long the gateway waits for Redis's answer to a command before failing it (and the request it was for, 503):
 * a Redis whose connection stays open but which answers nothing (stopped, blocked by a slow command, cut off by a
 * network that drops rather than refuses) would otherwise hold every request for as long as its client waits. Well
 * past a hold's time under load and its wait for replicas (REDIS_WAIT_TIMEOUT_MS, 250 by default).
 */
export const GATEWAY_COMMAND_TIMEOUT_MS = 5_000;

function commonOptions(name: string, commandTimeout: number | undefined): RedisOptions {
  return {
    connectionName: name,
    commandTimeout,
    password: process.env.REDIS_PASSWORD || undefined,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 2_000,
    lazyConnect: true,
    // At most half a second between tries: settlements owed land soon after Redis is back.
    retryStrategy: (attempt) => Math.min(attempt * 100, 500),
    reconnectOnError,
    // The request path batches its own scripts per turn of the event loop
    // (billing/hold-queue.ts, settlement-queue.ts); ioredis's automatic
    // pipelining on top of that cost Parley 5-10% more CPU per request.
    enableAutoPipelining: false,
  };
}

function client(shared: SharedRedis, name: string, commandTimeout: number | undefined): Redis {
  if (shared.kind === 'server') return new Redis(shared.url, { ...commonOptions(name, commandTimeout), tls: tls(shared.url.startsWith('rediss://')) });
  const useTls = process.env.REDIS_TLS === '1';
  if (shared.kind === 'sentinel') {
    return new Redis({
      ...commonOptions(name, commandTimeout),
      sentinels: shared.sentinels,
      name: shared.master,
      tls: tls(useTls),
      enableTLSForSentinelMode: useTls,
      sentinelRetryStrategy: (attempt) => Math.min(attempt * 100, 500),
      // No failoverDetector: its +switch-master handler closes the connector even while the client is reconnecting
      // through the sentinels (the primary was killed), which aborts that connect, and ioredis then ends the
      // connection for good ("Connection is closed." on every command, a replica that never serves again). A killed
      // primary's connection closes by itself and a demoted one answers READONLY (reconnectOnError): either way the
      // client asks the sentinels again within retryStrategy's half second.
    });
  }
  const cluster = new Cluster(shared.nodes, {
    redisOptions: { ...commonOptions(name, commandTimeout), tls: tls(useTls) },
    enableOfflineQueue: false,
    lazyConnect: true,
    clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 500),
    // A slot whose primary failed over moves: look again soon rather than wait out the default.
    slotsRefreshInterval: 1_000,
    enableAutoPipelining: false,
  });
  return cluster as unknown as Redis;
}

/**
 * A connection to the shared Redis, or to the private server's unix socket (a path). `commandTimeoutMs`: how long a
 * command may go unanswered before it fails (the gateway's GATEWAY_COMMAND_TIMEOUT_MS); without, it waits.
 */
export async function connectRedis(target: SharedRedis | string, name = 'parley', commandTimeoutMs?: number): Promise<Redis> {
  const shared: SharedRedis = typeof target === 'string' ? { kind: 'server', url: target } : target;
  const redis = client(shared, name, commandTimeoutMs);
  trackReplication(redis, shared);
  // A durable write's WAIT must end well before its command would be given up on.
  const waitMs = durabilityOf(redis).timeoutMs;
  if (commandTimeoutMs !== undefined && waitMs > commandTimeoutMs / 2) {
    throw new ConfigError(`REDIS_WAIT_TIMEOUT_MS (${waitMs}) must be at most ${commandTimeoutMs / 2}: half the time the gateway waits for any answer from Redis`);
  }
  // Reconnection is ioredis's job; an error event without a listener would crash the process.
  redis.on('error', () => {});
  await redis.connect();
  return redis;
}


/**
 * A second connection for pub/sub, which cannot share a connection with
 * commands. It does not renew its subscriptions when it reconnects: its user
 * subscribes again at each 'ready' and handles a failure, where ioredis's own
 * renewal has no handler for one, and a renewal cut short (by a replica
 * stopping meanwhile) was an unhandled rejection. On a cluster, a message
 * published on any node reaches subscribers on every node.
 */
export function subscriberFor(redis: Redis): Redis {
  // No command timeout: a renewal left unanswered while Redis stalls still lands, and then clears the key cache.
  const options = { enableOfflineQueue: true, maxRetriesPerRequest: null, autoResubscribe: false, commandTimeout: undefined };
  const sub = isCluster(redis)
    ? ((redis as unknown as Cluster).duplicate([], { enableOfflineQueue: true, redisOptions: { ...(redis as unknown as Cluster).options.redisOptions, ...options } }) as unknown as Redis)
    : redis.duplicate(options);
  sub.on('error', () => {});
  return sub;
}

