// Real multi-server Redis set-ups for tests, started from redis-server and
// redis-cli as an operator would: a Redis Cluster (made with `redis-cli
// --cluster create`) and a primary with a replica watched by three
// sentinels (`redis-server --sentinel`, which is what redis-sentinel is).
// Each server has its own port and folder, so a test can kill -9 one.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort, type TestRedis } from './redis.js';
import { sleep, until } from './fake-upstream.js';

const run = promisify(execFile);

interface Server {
  port: number;
  child: ChildProcess;
}

const exited = (server: Server) => server.child.exitCode !== null || server.child.signalCode !== null;

/** Whether the server answering on `server`'s port is that process, not another test file's that took the port first. */
async function answersItself(server: Server): Promise<boolean> {
  try {
    return new RegExp(`^process_id:${server.child.pid}\\b`, 'm').test(await cli(server.port, 'info', 'server'));
  } catch {
    return false;
  }
}

/**
 * A server on a free port, in its own folder under `dir`, once it answers as itself. Test files run side by side:
 * a port found free can be taken by another file's server before this one binds it; this one then exits, and
 * starts again on another port. Asking only for an answer on the port would take the other file's server for it,
 * and lose it when that file stops its own.
 */
async function startAnswering(dir: string, launch: (port: number, dir: string) => ChildProcess): Promise<Server> {
  for (;;) {
    const port = await freePort();
    const nodeDir = join(dir, String(port));
    rmSync(nodeDir, { recursive: true, force: true });
    await run('mkdir', ['-p', nodeDir]);
    const server = { port, child: launch(port, nodeDir) };
    await until(async () => exited(server) || (await answersItself(server)), 10_000);
    if (!exited(server)) return server;
  }
}

/** A redis-server with `args` on `port`, its data in `dir`. */
const redisServer = (args: string[]) => (port: number, dir: string) =>
  spawn('redis-server', [...args, '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes'], { stdio: 'ignore' });

function kill(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (exited(server)) return resolve();
    server.child.once('exit', () => resolve());
    server.child.kill('SIGKILL');
  });
}

async function cli(port: number, ...args: string[]): Promise<string> {
  return (await run('redis-cli', ['-p', String(port), ...args])).stdout.trim();
}

export interface TestCluster {
  /** host:port of every node, as REDIS_CLUSTER_NODES takes them. */
  nodes: string;
  /** A client of the cluster, for the test's own reads. */
  client: InstanceType<typeof Redis.Cluster>;
  /** The port of the primary that serves a key now. */
  primaryOf(key: string): Promise<number>;
  /** kill -9 of a node, then waits until its replica serves its slots. */
  killPrimary(port: number): Promise<void>;
  stop(): Promise<void>;
}

/** `primaries` primaries, each with `replicas` replicas, failing over after 2 s without its primary (1 s flapped on a loaded 2-core machine). */
export async function startTestCluster(primaries = 3, replicas = 1): Promise<TestCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'parley-cluster-'));
  const servers: Server[] = [];
  for (let i = 0; i < primaries * (1 + replicas); i++) {
    servers.push(await startAnswering(dir, redisServer(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'])));
  }
  await run('redis-cli', ['--cluster', 'create', ...servers.map((s) => `127.0.0.1:${s.port}`), '--cluster-replicas', String(replicas), '--cluster-yes']);
  const live = () => servers.filter((s) => !exited(s));
  const ok = async () => (await Promise.all(live().map((s) => cli(s.port, 'cluster', 'info')))).every((info) => info.includes('cluster_state:ok'));
  await until(ok, 20_000);
  // A replica that has not finished its first sync cannot take over (its data is too old to count).
  const replicasSynced = async () =>
    (await Promise.all(live().map((s) => cli(s.port, 'info', 'replication')))).every((info) => !info.includes('role:slave') || info.includes('master_link_status:up'));
  await until(replicasSynced, 20_000);
  const nodes = servers.map((s) => `127.0.0.1:${s.port}`).join(',');
  const client = new Redis.Cluster(servers.map((s) => ({ host: '127.0.0.1', port: s.port })), { slotsRefreshInterval: 500 });
  client.on('error', () => {});
  await client.ping();

  const primaryOf = async (key: string) => {
    const slot = Number(await cli(servers[0].port, 'cluster', 'keyslot', key));
    const slots = await client.cluster('SLOTS');
    return slots.find(([from, to]) => slot >= from && slot <= to)![2][1];
  };
  return {
    nodes,
    client,
    primaryOf,
    async killPrimary(port) {
      await kill(servers.find((s) => s.port === port)!);
      // Taken over once every live node agrees that the cluster is up and no slot is the dead node's.
      await until(async () => {
        if (!(await ok())) return false;
        const slots = (await cli(live()[0].port, 'cluster', 'slots')).split('\n');
        return !slots.includes(String(port));
      }, 30_000);
    },
    async stop() {
      client.disconnect();
      await Promise.all(servers.map(kill));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A 3-primary cluster (no replicas) behind the interface of one test server, for suites that run on both; it cannot be killed. */
export async function startClusterAsTestRedis(): Promise<TestRedis> {
  const cluster = await startTestCluster(3, 0);
  const cannot = () => Promise.reject(new Error('a whole test cluster is not killed or restarted'));
  const nodes = cluster.nodes.split(',').map((n) => ({ host: '127.0.0.1', port: Number(n.split(':')[1]) }));
  return { url: '', shared: { kind: 'cluster', nodes }, client: cluster.client as unknown as Redis, kill: cannot, restart: cannot, stop: () => cluster.stop() };
}

/** A primary, a replica and 3 sentinels behind the interface of one test server; the client follows the primary. */
export async function startSentinelsAsTestRedis(): Promise<TestRedis> {
  const set = await startTestSentinels();
  const sentinels = set.sentinels.split(',').map((n) => ({ host: '127.0.0.1', port: Number(n.split(':')[1]) }));
  const client = new Redis({ sentinels, name: set.master, maxRetriesPerRequest: 3 });
  client.on('error', () => {});
  const cannot = () => Promise.reject(new Error('a whole sentinel set is not killed or restarted'));
  return { url: '', shared: { kind: 'sentinel', sentinels, master: set.master }, client, kill: cannot, restart: cannot, stop: async () => (client.disconnect(), await set.stop()) };
}

export interface TestSentinels {
  /** host:port of the three sentinels, as REDIS_SENTINELS takes them. */
  sentinels: string;
  master: string;
  primaryPort(): Promise<number>;
  /** Stops the replica for `ms` (SIGSTOP, then SIGCONT), as a slow disk or a full network would stall it. */
  stallReplica(ms: number): Promise<void>;
  /** kill -9 of the primary; resolves when the sentinels have promoted its replica, with the time they did. */
  killPrimary(): Promise<number>;
  stop(): Promise<void>;
}

/** A primary, one replica and three sentinels (quorum 2) that fail over after 1 s of silence. */
export async function startTestSentinels(master = 'parley'): Promise<TestSentinels> {
  const dir = mkdtempSync(join(tmpdir(), 'parley-sentinel-'));
  const primary = await startAnswering(dir, redisServer([]));
  const primaryPortNumber = primary.port;
  const replica = await startAnswering(dir, redisServer(['--replicaof', '127.0.0.1', String(primaryPortNumber)]));
  const servers = [primary, replica];
  await until(async () => (await cli(replica.port, 'info', 'replication')).includes('master_link_status:up'), 10_000);
  const sentinels: Server[] = [];
  for (let i = 0; i < 3; i++) {
    const sentinel = (port: number, sentinelDir: string) => {
      const file = join(sentinelDir, 'sentinel.conf');
      writeFileSync(
        file,
        [`port ${port}`, 'bind 127.0.0.1', `dir ${sentinelDir}`, `sentinel monitor ${master} 127.0.0.1 ${primaryPortNumber} 2`, `sentinel down-after-milliseconds ${master} 1000`, `sentinel failover-timeout ${master} 5000`, ''].join('\n'),
      );
      return spawn('redis-server', [file, '--sentinel'], { stdio: 'ignore' });
    };
    sentinels.push(await startAnswering(dir, sentinel));
  }
  const primaryPort = async () => Number((await cli(sentinels[0].port, 'sentinel', 'get-master-addr-by-name', master)).split('\n')[1]);
  // Ready once every sentinel knows the replica and the others.
  await until(async () => {
    const views = await Promise.all(sentinels.map((s) => cli(s.port, 'sentinel', 'master', master).catch(() => '')));
    return views.every((v) => /num-slaves\n1\b/.test(v) && /num-other-sentinels\n2\b/.test(v));
  }, 20_000);
  return {
    sentinels: sentinels.map((s) => `127.0.0.1:${s.port}`).join(','),
    master,
    primaryPort,
    async stallReplica(ms) {
      const primary = await primaryPort();
      const replica = servers.find((s) => s.port !== primary)!;
      replica.child.kill('SIGSTOP');
      setTimeout(() => replica.child.kill('SIGCONT'), ms).unref();
    },
    async killPrimary() {
      const old = await primaryPort();
      await kill(servers.find((s) => s.port === old)!);
      await until(async () => (await primaryPort()) !== old, 20_000);
      return Date.now();
    },
    async stop() {
      await Promise.all([...servers, ...sentinels].map(kill));
      await sleep(10);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
