// A real redis-server per test file, on a free port with its own data folder,
// so that a test can kill and restart it without touching anyone else's data.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { SharedRedis } from '../../src/redis/shared-redis.js';

export interface TestRedis {
  url: string;
  /** How a gateway reaches it, where not by `url` (a cluster, sentinels). */
  shared?: SharedRedis;
  /** A plain client for the test's own reads and writes. */
  client: Redis;
  /** Kills the server (SIGKILL: no goodbye to clients), keeping its append-only file. */
  kill(): Promise<void>;
  /** Starts it again on the same port and files. */
  restart(): Promise<void>;
  /** Stops it and removes its data folder. */
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function waitUntilAnswering(url: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      return;
    } catch {
      probe.disconnect();
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  throw new Error(`redis-server at ${url} did not answer`);
}

/** Whether the server answering at `url` is the process `pid`: a port found free may be taken by another test file's server first. */
async function answeredBy(url: string, pid: number | undefined): Promise<boolean> {
  const probe = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  probe.on('error', () => {});
  try {
    return new RegExp(`^process_id:${pid}\\b`, 'm').test(await probe.info('server'));
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

export async function startTestRedis(): Promise<TestRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'parley-redis-'));
  let port = 0;
  let child: ChildProcess | undefined;
  const kill = () =>
    new Promise<void>((resolve) => {
      if (!child || child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  // Started on the same port, the one this server first bound: kill and restart keep its clients' address.
  const launch = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''], {
      stdio: 'ignore',
    });
    const launched = child;
    await waitUntilAnswering(`redis://127.0.0.1:${port}`);
    if (!(await answeredBy(`redis://127.0.0.1:${port}`, launched.pid))) throw new Error(`another redis-server took port ${port}`);
  };
  // Test files run side by side: where another file's server took the port found free, this one tries another.
  for (let tries = 0; ; tries++) {
    port = await freePort();
    try {
      await launch();
      break;
    } catch (err) {
      await kill();
      if (tries === 10) throw err;
    }
  }
  const url = `redis://127.0.0.1:${port}`;
  const client = new Redis(url, { maxRetriesPerRequest: 3 });
  client.on('error', () => {});
  return {
    url,
    client,
    kill,
    restart: launch,
    stop: async () => {
      client.disconnect();
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
