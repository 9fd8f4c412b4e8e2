// Where a request's time goes, from Parley's log lines, beside the same
// upstream called directly: the fast scripted upstream with a fixed first
// byte (a GPU's prefill), autocannon at some connections, whole and
// streamed 256-token replies. For each phase, p50 / p90 / p99 / max in ms:
// arrival to the credit hold standing (key, body, checks, hold), then to the
// upstream call sent (the plan and a slot), then to the upstream's answer
// (its headers: the upstream's own time and the wait for Parley's turn),
// then to the reply's first byte, then to the end of the reply; and the
// client's own figure, which adds the time before Parley's handler runs and
// after the reply leaves.
//
//   npm run build && node bench/request-phases.mjs [connections, 16] [upstream first byte ms, 20] [seconds per run, 10] [modes, whole,streamed]
import { createInterface } from 'node:readline';
import { apiLoad, benchModel, forked, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';

const CONNECTIONS = Number(process.argv[2] ?? 16);
const FIRST_BYTE_MS = process.argv[3] ?? '20';
const SECONDS = Number(process.argv[4] ?? 10);
const MODES = (process.argv[5] ?? 'whole,streamed').split(',');

const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const spread = (xs) => (xs.length ? [0.5, 0.9, 0.99].map((q) => quantile(xs, q).toFixed(1)).join(' / ') + ` / ${Math.max(...xs).toFixed(1)}` : '');
const PHASES = [
  ['hold standing', (l) => l.admitted_ms],
  ['plan and slot', (l) => l.upstream_sent_ms - l.admitted_ms],
  ['upstream answer', (l) => l.upstream_answered_ms - l.upstream_sent_ms],
  ['to first byte', (l) => l.first_byte_ms - l.upstream_answered_ms],
  ['to end', (l) => l.total_ms - l.first_byte_ms],
  ['in Parley, all', (l) => l.total_ms],
];

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0', FIRST_BYTE_MS, '0']);
  const upstream = `http://127.0.0.1:${port}/v1`;
  const parley = await startParley([benchModel(`http://127.0.0.1:${port}`)], {});
  let lines = [];
  parley.child.stdout.removeAllListeners('data');
  createInterface({ input: parley.child.stdout }).on('line', (l) => l.includes('"msg":"request"') && lines.push(JSON.parse(l)));
  const headers = { authorization: `Bearer ${parley.key}` };
  const rows = [];
  for (const mode of MODES) {
    await apiLoad(upstream, {}, mode, CONNECTIONS, WARMUP_SECONDS / 4);
    await apiLoad(`${parley.url}/v1`, headers, mode, CONNECTIONS, WARMUP_SECONDS / 2);
    const direct = await apiLoad(upstream, {}, mode, CONNECTIONS, SECONDS);
    await new Promise((r) => setTimeout(r, 300));
    lines = [];
    const client = await apiLoad(`${parley.url}/v1`, headers, mode, CONNECTIONS, SECONDS);
    // The last lines are written within 100 ms of their requests' end.
    await new Promise((r) => setTimeout(r, 300));
    const row = (phase, figure) => rows.push({ mode, phase, 'p50 / p90 / p99 / max ms': figure });
    row('direct, client', `${direct.latency.p50} / ${direct.latency.p90} / ${direct.latency.p99} / ${direct.latency.max}`);
    for (const [phase, of] of PHASES) row(phase, spread(lines.map(of).filter((x) => Number.isFinite(x))));
    row('Parley, client', `${client.latency.p50} / ${client.latency.p90} / ${client.latency.p99} / ${client.latency.max}`);
  }
  console.table(rows);
} finally {
  stopAll();
}
