// The one connection to the shared state. Parley fails closed: a command that
// cannot reach Redis fails at once (no offline queue, no silent retries), so
// the request that needed it gets a 503 instead of free service or a hang.
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Redis } from 'ioredis';
import { ApiError, stateUnavailable } from '../protocol/errors.js';

export type { Redis };

/**
 * TLS for a rediss:// URL: the system's certificate authorities, or those in
 * REDIS_CA_FILE (a managed Redis whose certificate a private CA signed).
 */
function tlsFor(target: string): ConnectionOptions | undefined {
  if (!target.startsWith('rediss://')) return undefined;
  const caFile = process.env.REDIS_CA_FILE;
  return caFile ? { ca: readFileSync(caFile) } : {};
}

/** A redis:// or rediss:// URL, or the path of a private server's unix socket. */
export async function connectRedis(target: string, name = 'parley'): Promise<Redis> {
  const redis = new Redis(target, {
    tls: tlsFor(target),
    connectionName: name,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 2_000,
    lazyConnect: true,
    // At most half a second between tries: settlements owed land soon after Redis is back.
    retryStrategy: (attempt) => Math.min(attempt * 100, 500),
    // The request path batches its own scripts per turn of the event loop
    // (billing/hold-queue.ts, settlement-queue.ts); ioredis's automatic
    // pipelining on top of that cost Parley 5-10% more CPU per request.
    enableAutoPipelining: false,
  });
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
 * stopping meanwhile) was an unhandled rejection.
 */
export function subscriberFor(redis: Redis): Redis {
  const sub = redis.duplicate({ enableOfflineQueue: true, maxRetriesPerRequest: null, autoResubscribe: false });
  sub.on('error', () => {});
  return sub;
}

/**
 * Awaits Redis work on a request's behalf: an ApiError raised meanwhile
 * passes through, and any failure to reach Redis becomes the 503 the request
 * is answered with.
 */
export async function failClosed<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw err instanceof ApiError ? err : stateUnavailable();
  }
}
