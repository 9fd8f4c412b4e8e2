// Without REDIS_URL, Parley keeps its state in a private redis-server in the
// data folder: append-only persistence, reachable only through a unix socket
// there. A server left running by an earlier process (or by an operator
// command running now) is reused rather than started twice on the same files.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';

export interface PrivateRedis {
  /** The socket path, which connectRedis takes as its target. */
  target: string;
  /** Stops the server if this process started it. */
  stop(): Promise<void>;
}

function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const conn = createConnection(socket);
    conn.once('connect', () => {
      conn.destroy();
      resolve(true);
    });
    conn.once('error', () => resolve(false));
  });
}

async function waitForSocket(socket: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with code ${child.exitCode}`);
    if (await answers(socket)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`redis-server did not open ${socket} within ${timeoutMs} ms`);
}

export async function startPrivateRedis(dataDir: string): Promise<PrivateRedis> {
  const dir = join(dataDir, 'redis');
  mkdirSync(dir, { recursive: true });
  const socket = join(dir, 'redis.sock');
  if (existsSync(socket) && (await answers(socket))) return { target: socket, stop: async () => {} };

  const child = spawn(
    'redis-server',
    ['--port', '0', '--unixsocket', socket, '--unixsocketperm', '700', '--dir', dir, '--appendonly', 'yes', '--appendfsync', 'everysec', '--save', '', '--loglevel', 'warning'],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const spawned = new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (err) =>
      reject(new Error(`cannot start redis-server (${err.message}); install it (scripts/install.sh does) or set REDIS_URL`)),
    );
  });
  await spawned;
  await waitForSocket(socket, child, 10_000);
  return {
    target: socket,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
