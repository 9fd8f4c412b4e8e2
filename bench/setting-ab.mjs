// A gateway setting, A/B within one Parley: as shipped against the setting
// changed, switched back and forth by rewriting its routing file (which it
// reloads), the two taking turns each round (the order reversed every other
// round), whole 256-token replies from the fast scripted upstream. One
// process serves both sides, so what differs between two processes (their
// heaps, what the JIT made of them, where the machine placed them) is not in
// the figure: two processes of one build differ by 3 to 5% in CPU per
// request on this VM, more than a feature of a few µs costs. Prints each
// round's requests/s and main-thread CPU per request, and the medians of the
// same-round ratios (shipped ÷ changed) and differences.
//
//   npm run build && node bench/setting-ab.mjs [setting, requestLog] [value, false] [seconds per run, 4] [rounds, 12] [connections, 32] [upstream first byte ms, 0] [spread ms, 0]
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiLoad, benchModel, forked, mainThreadCpuMicros, median, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';
import { setTimeout as sleep } from 'node:timers/promises';

const SETTING = process.argv[2] ?? 'requestLog';
const VALUE = JSON.parse(process.argv[3] ?? 'false');
const SECONDS = Number(process.argv[4] ?? 4);
const ROUNDS = Number(process.argv[5] ?? 12);
const CONNECTIONS = Number(process.argv[6] ?? 32);
const FIRST_BYTE_MS = process.argv[7] ?? '0';
const SPREAD_MS = process.argv[8] ?? '0';
// The routing file is read again 50 ms after it changes; a second of load after that lets the change settle in.
const RELOAD_MS = 500;
const SETTLE_SECONDS = 1;


try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0', FIRST_BYTE_MS, SPREAD_MS]);
  const parley = await startParley([benchModel(`http://127.0.0.1:${port}`)]);
  const file = join(parley.dataDir, 'routing.json');
  const shipped = JSON.parse(readFileSync(file, 'utf8'));
  const sides = { shipped, changed: { ...shipped, gateway: { ...shipped.gateway, [SETTING]: VALUE } } };
  const load = (seconds) => apiLoad(`${parley.url}/v1`, { authorization: `Bearer ${parley.key}` }, 'whole', CONNECTIONS, seconds);
  await load(WARMUP_SECONDS);
  const measured = { shipped: [], changed: [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const side of round % 2 ? ['changed', 'shipped'] : ['shipped', 'changed']) {
      writeFileSync(file, JSON.stringify(sides[side]));
      await sleep(RELOAD_MS);
      await load(SETTLE_SECONDS);
      const before = mainThreadCpuMicros(parley.child.pid);
      const r = await load(SECONDS);
      if (r.non2xx || r.errors) throw new Error(`${side}: ${r.non2xx} non-2xx, ${r.errors} errors`);
      measured[side].push({ rate: r.requests.average, us: (mainThreadCpuMicros(parley.child.pid) - before) / r.requests.total });
    }
    const [a, b] = [measured.shipped.at(-1), measured.changed.at(-1)];
    console.log(`round ${round + 1}: shipped ${Math.round(a.rate)} req/s, ${Math.round(a.us)} µs a request; ${SETTING}=${JSON.stringify(VALUE)} ${Math.round(b.rate)} req/s, ${Math.round(b.us)} µs a request`);
  }
  const ratios = measured.shipped.map((a, i) => a.rate / measured.changed[i].rate);
  const added = measured.shipped.map((a, i) => a.us - measured.changed[i].us);
  console.log(`shipped ÷ ${SETTING}=${JSON.stringify(VALUE)}: median ${median(ratios).toFixed(2)} (rounds: ${ratios.map((x) => x.toFixed(2)).join(' ')})`);
  console.log(`main-thread CPU a request, shipped − changed: median ${median(added).toFixed(1)} µs (rounds: ${added.map((x) => x.toFixed(0)).join(' ')}); medians ${median(measured.shipped.map((m) => m.us)).toFixed(0)} and ${median(measured.changed.map((m) => m.us)).toFixed(0)} µs`);
} finally {
  stopAll();
}
