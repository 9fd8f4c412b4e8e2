// Interactive first when the GPUs are full. One scripted engine
// (slots-engine.mjs: 8 sequence slots, a first-come queue, each streamed
// reply ~1 s) behind 3 Parley replicas on one Redis, its endpoint at
// maxConcurrent 8. An interactive account sends one streamed request every
// 200 ms (default tier) to the replicas in turn; a batch account keeps 48
// streamed flex requests in flight, its flex queue timeout 4 s. Measured:
// the interactive time to first token (p50, p99) alone and beside the
// flood; the engine's largest concurrency and queue; flex alone as a share
// of the engine's capacity in the 10 s right after the interactive requests
// end (the room flex leaves them lapses in a second); interactive requests
// beside the flood apart for the first 2 s (flex, which filled all but one
// slot while they were away, gives the slots back as its replies end: no
// request that has started is preempted) and after; the books afterwards (each account's balance
// against its usage events, flex at half price, refused flex free); and
// what the fleet's slots cost an admission, on this machine's Redis at
// 127.0.0.1:6379: asked of Redis (one script call to take a lease, one to
// give it back) and with a released lease passed on.
//
// With `engine`, the endpoint has no maxConcurrent: what the fleet sends is
// bounded by the capacity the engine shows in its vLLM gauges (it runs 8,
// and queues the rest, first come first served), once a reading has found
// it queueing; the flood then starts 8 s before the interactive requests,
// so that the queue it made in the engine before that reading has drained.
//
//   npm run build && node bench/service-tiers.mjs [seconds per phase, default 20] [slots from: config | engine]
import { Redis } from 'ioredis';
import { FleetSlots } from '../dist/routing/fleet-slots.js';
import { forked, startParley, stopAll } from './support.mjs';
import { setTimeout as sleep } from 'node:timers/promises';

const SECONDS = Number(process.argv[2] ?? 20);
const FROM_ENGINE = process.argv[3] === 'engine';
const SLOTS = 8;
const REPLY_MS = 1000;
const FLOOD = 48;
const AFTER_BURST_S = 10;
/**
 * How soon flex gives back the slots it filled when interactive requests come back: its replies end within one
 * REPLY_MS, and the interactive requests that waited for them, started together, end together a REPLY_MS later.
 */
const RAMP_S = 2;
const ADMIN = 'bench-admin-token';
process.env.PARLEY_ADMIN_TOKEN = ADMIN;

const percentile = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];

/** A streamed chat request; resolves to its time to first content and its outcome. */
async function streamed(gateway, key, tier) {
  const started = performance.now();
  const res = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true, service_tier: tier }),
  });
  if (!res.ok) return { status: res.status, code: (await res.json()).error?.code };
  let first;
  for await (const piece of res.body) {
    first ??= performance.now() - started;
    void piece;
  }
  return { status: 200, ttft: first };
}

async function admin(gateway, method, path, body) {
  const res = await fetch(`${gateway.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
  return path.includes('.csv') ? res.text() : res.json();
}

/** One streamed default request every 200 ms for `seconds`, to the replicas in turn: the times to first token, in the order sent. */
async function interactive(gateways, key, seconds) {
  const sent = [];
  for (let i = 0; i < seconds * 5; i++) {
    sent.push(streamed(gateways[i % gateways.length], key, 'default'));
    await sleep(200);
  }
  return (await Promise.all(sent)).map((r) => r.ttft);
}

/** Requests of the first RAMP_S seconds of an interactive phase: while flex gives back the slots it filled. */
const RAMP_REQUESTS = RAMP_S * 5;

/** Keeps `inFlight` flex requests going until `stop()`: counts of served and refused. */
function flexFlood(gateways, key, inFlight) {
  let stopped = false;
  const counts = { served: 0, refused: 0 };
  let turn = 0;
  const worker = async () => {
    while (!stopped) {
      const r = await streamed(gateways[turn++ % gateways.length], key, 'flex');
      if (r.status === 200) counts.served++;
      else if (r.code === 'resource_unavailable') counts.refused++;
      else throw new Error(`flex: ${r.status} ${r.code}`);
    }
  };
  const workers = Array.from({ length: inFlight }, worker);
  return { counts, stop: async () => ((stopped = true), await Promise.all(workers)) };
}

/**
 * Microseconds per admission and release through the fleet's slots, `count`
 * in a row, at `maxConcurrent`: 1 takes the last slot each time, so every
 * admission asks Redis; 8 leaves room, so a released lease passes to the
 * next admission for 20 ms after each grant.
 */
async function coordinationCost(count, maxConcurrent) {
  const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true });
  await redis.connect();
  const slots = new FleetSlots(redis);
  try {
    const endpoint = `bench-${process.pid}`;
    const started = performance.now();
    for (let i = 0; i < count; i++) slots.release(endpoint, await slots.acquire(endpoint, 'default', { maxConcurrent, flexFillsAll: false }));
    await redis.ping();
    return ((performance.now() - started) * 1000) / count;
  } finally {
    await slots.close();
    redis.disconnect();
  }
}

try {
  const coordinationUs = { asked: await coordinationCost(5000, 1), passedOn: await coordinationCost(5000, 8) };
  const engine = await forked('bench/slots-engine.mjs', ['0', String(SLOTS), String(REPLY_MS)]);
  const models = [{
    id: 'm', contextWindow: 32768, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 },
    endpoints: [{ kind: 'vllm', url: `http://127.0.0.1:${engine.port}/v1`, ...(FROM_ENGINE ? {} : { maxConcurrent: SLOTS }), maxQueue: 256 }],
  }];
  const settings = { health: { probe: { intervalMs: 0 } }, failover: { flexQueueTimeoutMs: 4000, queueTimeoutMs: 30000 } };
  const gateways = [await startParley(models, settings)];
  while (gateways.length < 3) gateways.push(await startParley(models, settings, [], gateways[0]));
  const accounts = {};
  for (const name of ['interactive', 'batch']) {
    const made = await admin(gateways[0], 'POST', '/accounts', { email: `${name}@bench.example`, credit: '1000' });
    accounts[name] = { id: made.account.id, key: made.apiKey };
  }

  const alone = await interactive(gateways, accounts.interactive.key, SECONDS);
  const flood = flexFlood(gateways, accounts.batch.key, FLOOD);
  await sleep(FROM_ENGINE ? 8000 : 3000);
  const beside = await interactive(gateways, accounts.interactive.key, SECONDS);
  // Flex alone in the 10 s right after the interactive requests end: served per second against the engine's 8.
  const servedBefore = flood.counts.served;
  await sleep(AFTER_BURST_S * 1000);
  const flexShare = (flood.counts.served - servedBefore) / AFTER_BURST_S / (SLOTS * 1000 / REPLY_MS);
  await flood.stop();
  const engineMost = await (await fetch(`http://127.0.0.1:${engine.port}/`)).json();

  // The books: every account's balance moved by exactly what its usage events charged.
  await sleep(1500);
  const books = {};
  for (const [name, { id }] of Object.entries(accounts)) {
    const csv = (await admin(gateways[0], 'GET', `/usage.csv?account=${id}`)).trim().split('\n');
    const header = csv[0].split(',');
    const rows = csv.slice(1).map((line) => Object.fromEntries(line.split(',').map((v, i) => [header[i], v])));
    const charged = rows.reduce((sum, r) => sum + Math.round(Number(r.charged) * 1e6), 0);
    const balance = Math.round(Number((await admin(gateways[0], 'GET', `/accounts/${id}`)).balance) * 1e6);
    const complete = rows.filter((r) => r.outcome === 'complete');
    books[name] = {
      requests: rows.length,
      'complete at': [...new Set(complete.map((r) => `${r.service_tier} ${r.cost}`))].join(', '),
      'refused, charged': `${rows.length - complete.length}, ${rows.filter((r) => r.outcome !== 'complete').reduce((s, r) => s + Number(r.charged), 0)}`,
      'balance + charged = 1000': (balance + charged) / 1e6 === 1000,
    };
  }

  for (const g of [...gateways].reverse()) g.child.kill('SIGTERM');
  const ms = (x) => `${x.toFixed(0)} ms`;
  console.log(`3 replicas, one engine of ${SLOTS} slots (replies ${REPLY_MS} ms), ${FROM_ENGINE ? 'its capacity read from the engine' : `maxConcurrent ${SLOTS}`}, ${FLOOD} flex in flight, interactive every 200 ms, ${SECONDS} s per phase`);
  console.table({
    'interactive alone': { 'TTFT p50': ms(percentile(alone, 0.5)), 'TTFT p99': ms(percentile(alone, 0.99)) },
    [`beside the flex flood, from ${RAMP_S} s in`]: { 'TTFT p50': ms(percentile(beside.slice(RAMP_REQUESTS), 0.5)), 'TTFT p99': ms(percentile(beside.slice(RAMP_REQUESTS), 0.99)), 'goal p99': ms(1.5 * percentile(alone, 0.99) + 50) },
    [`beside the flex flood, its first ${RAMP_S} s`]: { 'TTFT p50': ms(percentile(beside.slice(0, RAMP_REQUESTS), 0.5)), 'TTFT p99': ms(Math.max(...beside.slice(0, RAMP_REQUESTS))) },
  });
  console.log(`engine at most: ${engineMost.running} running, ${engineMost.waiting} queued; flood served ${flood.counts.served}, refused ${flood.counts.refused}`);
  console.log(`flex alone in the ${AFTER_BURST_S} s right after the interactive requests: ${flexShare.toFixed(2)} of the engine's capacity`);
  console.log(`the fleet's slots: ${coordinationUs.asked.toFixed(0)} µs per admission and release asked of Redis, ${coordinationUs.passedOn.toFixed(1)} µs with leases passed on`);
  console.table(books);
} finally {
  stopAll();
}
