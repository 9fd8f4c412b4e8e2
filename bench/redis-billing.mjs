// How many admissions plus settlements per second Parley's Redis work
// sustains, on one Redis primary and on a 3-primary Redis Cluster, in the
// same run, with the gateway's own cost taken out: WORKERS processes drive
// the billing layer directly (HoldQueue, then SettlementQueue, as a request
// does), each keeping IN_FLIGHT requests going over ACCOUNTS accounts.
// Reports requests/s (one hold + one settlement each), the script calls
// (round trips) and the Redis commands, those run inside scripts included,
// per request (INFO commandstats over every primary), and the Redis CPU per
// request (INFO cpu), from which the README's scaling note is worked out:
// a primary saturates at about 1e6 / (CPU µs per request) requests/s.
//
//   npm run build && node bench/redis-billing.mjs [seconds, default 10] [workers, default 2]
import { execFileSync, fork, spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, ROOT, track } from './support.mjs';

const SECONDS = Number(process.argv[2] ?? 10);
const WORKERS = Number(process.argv[3] ?? 2);
const ACCOUNTS = 64;
const IN_FLIGHT = 64;

const dist = (path) => import(join(ROOT, 'dist', path));

if (process.argv[2] === 'worker') await worker(JSON.parse(process.argv[3]));
else await main();

/** One process: holds and settles for `seconds`, then reports how many requests it completed. */
async function worker({ shared, accounts, seconds }) {
  const { connectRedis } = await dist('redis/connection.js');
  const { HoldQueue } = await dist('billing/hold-queue.js');
  const { SettlementQueue } = await dist('billing/settlement-queue.js');
  const redis = await connectRedis(shared, 'bench');
  const holds = new HoldQueue(redis);
  const settlements = new SettlementQueue(redis);
  const prices = { missPico: 1_000_000, hitPico: 100_000, outputPico: 2_000_000 };
  let done = 0;
  let stop = false;
  let id = 0;
  const loop = async (w) => {
    for (let i = w; !stop; i += IN_FLIGHT) {
      const account = accounts[i % accounts.length];
      const requestId = `${process.pid}-${id++}`;
      const held = await holds.hold({ hold: { account, requestId, ttlMs: 60_000, prices, promptTokens: 100, n: 1, maxReplyTokens: 100 } });
      if (held.kind !== 'held') throw new Error(`hold: ${held.kind}`);
      await settlements.settle({ account, keyId: 'bench', requestId, model: 'm', endpoint: 'e', outcome: 'complete', usage: { prompt_tokens: 100, completion_tokens: 50, cached_tokens: 0 }, cost: 200 });
      done++;
    }
  };
  process.send('ready');
  await new Promise((resolve) => process.once('message', resolve));
  setTimeout(() => (stop = true), seconds * 1000);
  await Promise.all(Array.from({ length: IN_FLIGHT }, (_, w) => loop(w)));
  process.send({ done });
  redis.disconnect();
}

function server(dir, port, args = []) {
  mkdirSync(dir, { recursive: true });
  return track(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', ...args], { stdio: 'ignore' }));
}

async function answering(port) {
  for (let i = 0; i < 200; i++) {
    try {
      if (execFileSync('redis-cli', ['-p', String(port), 'ping']).toString().trim() === 'PONG') return;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`redis-server on ${port} did not start`);
}

async function onePrimary(dir) {
  const port = freePort();
  server(join(dir, 'single'), port);
  await answering(port);
  return { shared: { kind: 'server', url: `redis://127.0.0.1:${port}` }, primaries: [port] };
}

async function cluster(dir) {
  const ports = [freePort(), freePort(), freePort()];
  for (const port of ports) server(join(dir, String(port)), port, ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf']);
  for (const port of ports) await answering(port);
  execFileSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-yes'], { stdio: 'ignore' });
  for (;;) {
    const states = ports.map((p) => execFileSync('redis-cli', ['-p', String(p), 'cluster', 'info']).toString());
    if (states.every((s) => s.includes('cluster_state:ok'))) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return { shared: { kind: 'cluster', nodes: ports.map((port) => ({ host: '127.0.0.1', port })) }, primaries: ports };
}

/** Total commands and CPU seconds of the primaries so far. */
async function serverWork(ports) {
  let commands = 0;
  let scripts = 0;
  let cpu = 0;
  for (const port of ports) {
    const r = new Redis(port);
    const stats = await r.info('commandstats');
    for (const m of stats.matchAll(/calls=(\d+)/g)) commands += Number(m[1]);
    for (const m of stats.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+)/g)) scripts += Number(m[1]);
    const info = await r.info('cpu');
    cpu += Number(/used_cpu_user:([\d.]+)/.exec(info)[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)[1]);
    r.disconnect();
  }
  return { commands, scripts, cpu };
}

async function measure(name, topology) {
  const { connectRedis } = await dist('redis/connection.js');
  const { createAccount } = await dist('accounts/accounts.js');
  const { changeCredit } = await dist('billing/credit-ledger.js');
  const admin = await connectRedis(topology.shared, 'bench-admin');
  const accounts = [];
  for (let i = 0; i < ACCOUNTS; i++) {
    const { id } = await createAccount(admin, { email: `bench-${i}@example.com` });
    await changeCredit(admin, id, 'grant', 1e15, 'bench');
    accounts.push(id);
  }
  admin.disconnect();
  const workers = Array.from({ length: WORKERS }, () => track(fork(new URL(import.meta.url).pathname, ['worker', JSON.stringify({ shared: topology.shared, accounts, seconds: SECONDS })])));
  await Promise.all(workers.map((w) => new Promise((resolve) => w.once('message', resolve))));
  const before = await serverWork(topology.primaries);
  const results = workers.map((w) => new Promise((resolve) => w.once('message', (m) => resolve(m.done))));
  for (const w of workers) w.send('go');
  const done = (await Promise.all(results)).reduce((a, b) => a + b, 0);
  const after = await serverWork(topology.primaries);
  // INFO itself is a few commands: negligible against hundreds of thousands.
  const row = {
    topology: name,
    'requests/s': Math.round(done / SECONDS),
    'script calls/request': ((after.scripts - before.scripts) / done).toFixed(2),
    'commands/request (in scripts too)': ((after.commands - before.commands) / done).toFixed(2),
    'Redis CPU µs/request': (((after.cpu - before.cpu) * 1e6) / done).toFixed(1),
  };
  console.log(row);
  return row;
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'parley-bench-redis-'));
  const rows = [];
  rows.push(await measure('1 primary', await onePrimary(dir)));
  rows.push(await measure('3-primary cluster', await cluster(dir)));
  console.table(rows);
  process.exit(0);
}
