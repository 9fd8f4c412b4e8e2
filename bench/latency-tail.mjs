// Parley's latency tail and cost per request beside the same fast scripted
// upstream called directly and through a bare http-proxy-3 pass-through, in
// one run: requests/s, p50/p99/p99.9 at 1, 16 and 32 connections, whole and
// streamed 256-token replies, and the main-thread CPU per request of the
// pass-through and of Parley (its full path: key, hold, slot, forward,
// settlement, metrics and a log line per request, to a pipe the script
// reads). Parley runs with count-hook.mjs (its allocation profiler off),
// for how late its event loop ran (the wait of a request that arrives
// while it is busy), its longest garbage collection and its Redis round
// trips per request.
// The three take turns in each cell; each first serves an unmeasured warm-up.
//
//   npm run build && node bench/latency-tail.mjs [seconds per run, default 10] [upstream first byte ms, default 0] [spread ms either side, default 0]
import { apiLoad, benchModel, countHook, forked, hookCounts, mainThreadCpuMicros, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';

const SECONDS = Number(process.argv[2] ?? 10);
const FIRST_BYTE_MS = process.argv[3] ?? '0';
const SPREAD_MS = process.argv[4] ?? '0';
const CONNECTIONS = [1, 16, 32];
const MODES = ['whole', 'streamed'];
try {
  const { port: upstreamPort } = await forked('bench/fast-upstream.mjs', ['0', FIRST_BYTE_MS, SPREAD_MS]);
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  const proxy = await forked('bench/bare-proxy.mjs', [upstream, '0']);
  process.env.COUNT_HOOK_ALLOCATIONS = '0';
  const parley = await startParley([benchModel(upstream)], { failover: { queueTimeoutMs: 200 } }, countHook());
  const targets = [
    { name: 'direct', url: `${upstream}/v1`, headers: {} },
    { name: 'pass-through', url: `http://127.0.0.1:${proxy.port}/v1`, headers: {}, pid: proxy.child.pid },
    { name: 'parley', url: `${parley.url}/v1`, headers: { authorization: `Bearer ${parley.key}` }, pid: parley.child.pid, hooked: parley.child },
  ];
  const rows = [];
  for (const mode of MODES) {
    for (const t of targets) await apiLoad(t.url, t.headers, mode, 32, WARMUP_SECONDS / 2);
    for (const connections of CONNECTIONS) {
      for (const t of connections === 16 ? [...targets].reverse() : targets) {
        const countsBefore = t.hooked && (await hookCounts(t.hooked));
        const cpuBefore = t.pid ? mainThreadCpuMicros(t.pid) : 0;
        const r = await apiLoad(t.url, t.headers, mode, connections, SECONDS);
        const cpu = t.pid ? (mainThreadCpuMicros(t.pid) - cpuBefore) / r.requests.total : undefined;
        const counts = t.hooked && (await hookCounts(t.hooked));
        rows.push({
          mode,
          connections,
          target: t.name,
          'req/s': Math.round(r.requests.average),
          'p50 ms': r.latency.p50,
          'p99 ms': r.latency.p99,
          'p99.9 ms': r.latency.p99_9,
          'max ms': r.latency.max,
          'main-thread µs/req': cpu === undefined ? '' : Math.round(cpu),
          'loop delay p99 / max ms': counts ? `${counts.loopDelayMs.p99} / ${counts.loopDelayMs.max}` : '',
          'longest GC ms': counts ? Math.round(counts.gc.longestMs * 10) / 10 : '',
          'Redis round trips/req': counts ? Math.round(((counts.writes.redis - countsBefore.writes.redis) / r.requests.total) * 100) / 100 : '',
          errors: r.errors + r.non2xx,
        });
      }
    }
  }
  console.table(rows);
} finally {
  stopAll();
}
