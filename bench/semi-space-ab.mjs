// Parley's young generation, A/B in one run: the bin's semi-space size against
// others, on the latency tail and requests/s of whole and streamed 256-token
// replies at 16 and 32 connections, the variants taking turns each round (the
// order reversed every other round), with the main thread's scavenge pauses
// and its longest pause of any collection (mark-compacts too).
//
//   npm run build && node bench/semi-space-ab.mjs [sizes in MB, default 64,16] [seconds per run, default 10] [rounds, default 3] [upstream first byte ms, default 0] [spread ms either side, default 0]
import { apiLoad, benchModel, forked, median, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';

const SIZES = (process.argv[2] ?? '64,16').split(',');
const SECONDS = Number(process.argv[3] ?? 10);
const ROUNDS = Number(process.argv[4] ?? 3);
const FIRST_BYTE_MS = process.argv[5] ?? '0';
const SPREAD_MS = process.argv[6] ?? '0';

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0', FIRST_BYTE_MS, SPREAD_MS]);
  const variants = [];
  for (const mb of SIZES) {
    const parley = await startParley([benchModel(`http://127.0.0.1:${port}`)], { failover: { queueTimeoutMs: 200 } }, ['--trace-gc', `--max-semi-space-size=${mb}`]);
    const pauses = [];
    const longest = { ms: 0 };
    parley.child.stdout.on('data', (d) => {
      for (const m of String(d).matchAll(/(Scavenge|Mark-Compact)[^,\n]*, ([\d.]+) \/ [\d.]+ ms/g)) {
        if (m[1] === 'Scavenge') pauses.push(Number(m[2]));
        longest.ms = Math.max(longest.ms, Number(m[2]));
      }
    });
    variants.push({ mb, parley, pauses, longest, headers: { authorization: `Bearer ${parley.key}` } });
  }
  const rows = [];
  for (const mode of ['whole', 'streamed']) {
    for (const v of variants) await apiLoad(`${v.parley.url}/v1`, v.headers, mode, 32, WARMUP_SECONDS / 2);
    for (const connections of [16, 32]) {
      const runs = new Map(variants.map((v) => [v.mb, []]));
      for (let round = 0; round < ROUNDS; round++) {
        for (const v of round % 2 ? [...variants].reverse() : variants) {
          v.pauses.length = 0;
          v.longest.ms = 0;
          const r = await apiLoad(`${v.parley.url}/v1`, v.headers, mode, connections, SECONDS);
          const sorted = [...v.pauses].sort((a, b) => a - b);
          runs.get(v.mb).push({ rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, p999: r.latency.p99_9, scavenges: sorted.length, pause: sorted[Math.floor(sorted.length / 2)] ?? 0, pausedMs: sorted.reduce((a, b) => a + b, 0), longest: v.longest.ms });
        }
      }
      for (const [mb, list] of runs) {
        const mid = (k) => median(list.map((x) => x[k]));
        rows.push({ mode, connections, 'semi-space MB': mb, 'req/s': Math.round(mid('rps')), 'p50 ms': mid('p50'), 'p99 ms': mid('p99'), 'p99.9 ms': mid('p999'), 'scavenges/s': Math.round(mid('scavenges') / SECONDS), 'median pause ms': mid('pause').toFixed(1), 'paused ms/s': Math.round(mid('pausedMs') / SECONDS), 'longest pause ms': mid('longest').toFixed(1), 'p99 by round': list.map((x) => x.p99).join(' ') });
      }
    }
  }
  console.table(rows);
} finally {
  stopAll();
}
