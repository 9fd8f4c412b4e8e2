// What a wake of the event loop costs this machine after the process has
// idled, and how many a request makes. Three parts:
// - a fixed small task (a small body parsed and written again), timed back
//   to back and after the process idled 1, 5 and 20 ms: the same work, run
//   cold;
// - a Redis round trip (a script call, as a hold is one), its wall time
//   back to back and after the process idled 20 ms;
// - at one connection behind the fast upstream, its first byte at once and
//   after 20 ms: the bare pass-through, Parley, and Parley with the fleet's
//   slots taken out (a patched build: each replica goes by its own count),
//   in turns; main-thread CPU per request and the main thread's voluntary
//   context switches per request (from /proc: each a wait in epoll that
//   something woke).
//
//   npm run build && node bench/wake-cost.mjs [seconds per run, 6] [rounds, 3]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { apiLoad, benchModel, FLEET_SLOTS_OFF, forked, mainThreadCpuMicros, median, patchedBuild, startParley, stopAll } from './support.mjs';

const SECONDS = Number(process.argv[2] ?? 6);
const ROUNDS = Number(process.argv[3] ?? 3);

const BODY = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'hello world '.repeat(10) }, { role: 'assistant', content: 'hi' }], max_tokens: 256 });
const smallTask = () => JSON.stringify(JSON.parse(BODY)).length;

/** The median µs of `task`, run `times` times, each after `pause` (none: back to back), to a tenth. */
async function timed(task, times, pause) {
  const us = [];
  for (let i = 0; i < times; i++) {
    if (pause) await pause();
    const started = performance.now();
    await task();
    us.push((performance.now() - started) * 1000);
  }
  return Math.round(median(us) * 10) / 10;
}

const idle = (ms) => () => sleep(ms);

/** A script call on Parley's private Redis, as a hold is one: its wall time back to back and after idling. */
async function redisRoundTrips(socket) {
  const redis = new Redis(socket);
  const roundTrip = () => redis.eval('return redis.call("INCR", KEYS[1])', 1, 'bench:wake-cost');
  await timed(roundTrip, 2_000);
  console.log('\nA Redis round trip (a script call), µs of wall time, medians');
  console.table([{ 'back to back': await timed(roundTrip, 2_000), 'after 20 ms idle': await timed(roundTrip, 150, idle(20)) }]);
  redis.disconnect();
}

/** The main thread's voluntary context switches so far: each a wait that something woke. */
function wakes(pid) {
  const status = readFileSync(`/proc/${pid}/task/${pid}/status`, 'utf8');
  return Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)[1]);
}

try {
  for (let i = 0; i < 20_000; i++) smallTask();
  const cold = { 'back to back': await timed(smallTask, 2_000) };
  for (const ms of [1, 5, 20]) cold[`after ${ms} ms idle`] = await timed(smallTask, 150, idle(ms));
  console.log('\nA small task (a small body parsed and written again), µs, medians');
  console.table([cold]);

  const withoutSlots = patchedBuild('no-fleet-slots', [FLEET_SLOTS_OFF]);
  const rows = [];
  for (const firstByteMs of [0, 20]) {
    const { port } = await forked('bench/fast-upstream.mjs', ['0', String(firstByteMs)]);
    const upstream = `http://127.0.0.1:${port}`;
    const proxy = await forked('bench/bare-proxy.mjs', [upstream, '0']);
    const parley = await startParley([benchModel(upstream)]);
    if (firstByteMs === 0) await redisRoundTrips(join(parley.dataDir, 'redis/redis.sock'));
    const unslotted = await startParley([benchModel(upstream)], {}, [], undefined, withoutSlots);
    const targets = [
      { name: 'pass-through', url: `http://127.0.0.1:${proxy.port}/v1`, headers: {}, pid: proxy.pid },
      ...[['Parley', parley], ['Parley, fleet slots out', unslotted]].map(([name, p]) => ({ name, url: `${p.url}/v1`, headers: { authorization: `Bearer ${p.key}` }, pid: p.child.pid })),
    ];
    for (const t of targets) {
      await apiLoad(t.url, t.headers, 'whole', 1, 4);
      Object.assign(t, { requests: 0, cpu: 0, woke: 0 });
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const t of round % 2 ? [...targets].reverse() : targets) {
        const [cpu, woke] = [mainThreadCpuMicros(t.pid), wakes(t.pid)];
        const r = await apiLoad(t.url, t.headers, 'whole', 1, SECONDS);
        t.requests += r.requests.total;
        t.cpu += mainThreadCpuMicros(t.pid) - cpu;
        t.woke += wakes(t.pid) - woke;
      }
    }
    for (const t of targets) {
      rows.push({ 'first byte ms': firstByteMs, target: t.name, 'req/s': Math.round(t.requests / (ROUNDS * SECONDS)), 'µs a request': Math.round(t.cpu / t.requests), 'wakes a request': (t.woke / t.requests).toFixed(2) });
    }
  }
  console.log('\nOne connection, whole replies: main-thread CPU and wakes per request, over all rounds');
  console.table(rows);
} finally {
  stopAll();
}
