// Main-thread CPU per request along the history: several revisions, each a
// `parley serve` on its own Redis, taking turns (the order reversed every
// other round) serving the same load from the fast upstream. Prints each
// one's requests/s and CPU per request round by round, then its median
// round: where a cost came in, between two revisions, and how much, as a
// bisection by measurement in one run.
//
//   npm run build && node bench/revision-walk.mjs [revisions, comma-separated; "this" is this checkout's build, 4e458b7,this] [mode, whole] [connections, 32] [seconds per run, 6] [rounds, 4]
import { apiLoad, buildOf, forked, mainThreadCpuMicros, median, revisionModel, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';

const REVISIONS = (process.argv[2] ?? '4e458b7,this').split(',');
const MODE = process.argv[3] ?? 'whole';
const CONNECTIONS = Number(process.argv[4] ?? 32);
const SECONDS = Number(process.argv[5] ?? 6);
const ROUNDS = Number(process.argv[6] ?? 4);

try {
  const roots = REVISIONS.map((r) => (r === 'this' ? undefined : buildOf(r)));
  const { port } = await forked('bench/fast-upstream.mjs', ['0', '0', '0']);
  const models = [revisionModel(`http://127.0.0.1:${port}`, MODE)];
  const targets = [];
  for (const [i, name] of REVISIONS.entries()) targets.push({ name, parley: await startParley(models, {}, [], undefined, roots[i]), rates: [], micros: [] });
  const load = (t, seconds) => apiLoad(`${t.parley.url}/v1`, { authorization: `Bearer ${t.parley.key}` }, MODE, CONNECTIONS, seconds);
  for (const t of targets) await load(t, WARMUP_SECONDS);
  console.log(`${MODE}, ${CONNECTIONS} connections: req/s and main-thread µs per request, round by round`);
  for (let round = 0; round < ROUNDS; round++) {
    for (const t of round % 2 ? [...targets].reverse() : targets) {
      const before = mainThreadCpuMicros(t.parley.child.pid);
      const r = await load(t, SECONDS);
      if (r.non2xx || r.errors) throw new Error(`${t.name}: ${r.non2xx} non-2xx, ${r.errors} errors`);
      t.rates.push(r.requests.average);
      t.micros.push((mainThreadCpuMicros(t.parley.child.pid) - before) / r.requests.total);
    }
  }
  for (const t of targets) {
    const rounds = t.rates.map((rate, i) => `${Math.round(rate)}/${Math.round(t.micros[i])}`).join(' ');
    console.log(`${t.name.padEnd(8)} median ${String(Math.round(median(t.rates))).padStart(5)} req/s, ${String(Math.round(median(t.micros))).padStart(4)} µs   (${rounds})`);
  }
} finally {
  stopAll();
}
