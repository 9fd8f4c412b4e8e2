// Where the shared state is, as the environment names it (REDIS_URL,
// REDIS_SENTINELS, REDIS_CLUSTER_NODES), and which kind a connection is.
import { Cluster, type Redis } from 'ioredis';
import { ConfigError } from '../config-error.js';

interface HostPort {
  host: string;
  port: number;
}

/** Where the shared state is, as REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES say. */
export type SharedRedis =
  | { kind: 'server'; url: string }
  | { kind: 'sentinel'; sentinels: HostPort[]; master: string }
  | { kind: 'cluster'; nodes: HostPort[] };

function hostPorts(text: string, name: string): HostPort[] {
  return text.split(',').map((part) => {
    const m = /^\s*([^\s:]+|\[[^\]]+\]):(\d+)\s*$/.exec(part);
    if (!m) throw new ConfigError(`${name}: "${part}" is not host:port`);
    return { host: m[1].replace(/^\[|\]$/g, ''), port: Number(m[2]) };
  });
}

/** The shared Redis the environment names, or undefined for the private one. One of the three may be set. */
export function sharedRedisFromEnv(): SharedRedis | undefined {
  const REDIS_URL = process.env.REDIS_URL;
  const REDIS_SENTINELS = process.env.REDIS_SENTINELS;
  const REDIS_SENTINEL_MASTER = process.env.REDIS_SENTINEL_MASTER;
  const REDIS_CLUSTER_NODES = process.env.REDIS_CLUSTER_NODES;
  const set = Object.entries({ REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES }).filter(([, value]) => value);
  if (set.length > 1) throw new ConfigError(`set one of REDIS_URL, REDIS_SENTINELS and REDIS_CLUSTER_NODES, not ${set.map(([name]) => name).join(' and ')}`);
  if (REDIS_URL) return { kind: 'server', url: REDIS_URL };
  if (REDIS_SENTINELS) {
    if (!REDIS_SENTINEL_MASTER) throw new ConfigError('REDIS_SENTINELS needs REDIS_SENTINEL_MASTER (the name the sentinels monitor)');
    return { kind: 'sentinel', sentinels: hostPorts(REDIS_SENTINELS, 'REDIS_SENTINELS'), master: REDIS_SENTINEL_MASTER };
  }
  if (REDIS_CLUSTER_NODES) return { kind: 'cluster', nodes: hostPorts(REDIS_CLUSTER_NODES, 'REDIS_CLUSTER_NODES') };
  return undefined;
}

export const isCluster = (redis: Redis): boolean => redis instanceof Cluster;
