// Throughput of Parley's request path against the same fast scripted
// upstream called directly and through a bare http-proxy-3 pass-through
// (and Portkey's gateway when `@portkey-ai/gateway` is installed), whole and
// streamed 256-token replies and embeddings of 16 texts (base64 vectors, as
// the openai clients ask for them), autocannon with 32 connections.
//
// Parley runs its full path: API key, validation, credit hold in Redis,
// forward, stream rewriting, settlement, its telemetry as shipped (GenAI
// metrics and a log line per request, to /dev/null here); a second Parley
// runs with its log line off, the one part of its telemetry that can be,
// for what it costs. Then it is driven above capacity
// (512 connections against an endpoint limited to 64 at once plus a queue of
// 64) for OVERLOAD_SECONDS: served, 503/429, other errors, peak RSS; and
// afterwards the books: open holds, and grants − charges = balance, exactly.
//
// A loaded small VM is noisy, so the targets take turns, in the reverse
// order every other round: ROUNDS rounds of each, and the table shows each
// target's median round; the ratios are
// medians of the same-round ratios. Every target first serves an unmeasured
// warm-up run per mode (WARMUP_SECONDS, support.mjs), so that each is
// measured with its code compiled, as a long-running server is, not while
// the JIT is still at work.
//
// With a revision as the sixth argument, that revision's Parley (built from
// git, as revision-ab.mjs builds it) is one more target, on the same
// settings (chat loads only: before embeddings, a model named no APIs):
// what the ratios were before a change, measured in the same run on the
// same machine (a ratio moves from day to day with the VM).
//
//   npm run build && node bench/gateway-throughput.mjs [seconds per run, default 10] [overload seconds, default 60] [rounds, default 3] [modes, default whole,streamed,embeddings] [a revision beside, default none]
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiLoad, benchModel, buildOf, forked, median, revisionModel, ROOT, startParley, stopAll, track, waitForPort, WARMUP_SECONDS } from './support.mjs';

const SECONDS = Number(process.argv[2] ?? 10);
const OVERLOAD_SECONDS = Number(process.argv[3] ?? 60);
const ROUNDS = Number(process.argv[4] ?? 3);
/** Which loads to measure (LOADS in support.mjs): by default all three. */
const MODES = (process.argv[5] ?? 'whole,streamed,embeddings').split(',');
const REVISION = process.argv[6];
const DEMO_CREDIT_MICROS = 1_000_000 * 1_000_000;

async function startPortkey() {
  const bin = join(ROOT, 'node_modules/@portkey-ai/gateway/build/start-server.js');
  if (!existsSync(bin)) return undefined;
  const port = 8787;
  track(spawn(process.execPath, [bin, `--port=${port}`], { stdio: ['ignore', 'ignore', 'ignore'] }));
  await waitForPort(`http://127.0.0.1:${port}/`);
  return port;
}

const load = (base, headers, mode, connections = 32, duration = SECONDS) => apiLoad(base, headers, mode, connections, duration);

/** Peak resident memory of a process, from /proc. */
const peakRssMiB = (pid) => Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;

async function overload(parley) {
  const r = await load(`${parley.url}/v1`, { authorization: `Bearer ${parley.key}` }, 'whole', 512, OVERLOAD_SECONDS);
  const byStatus = r.statusCodeStats ?? {};
  const count = (code) => byStatus[code]?.count ?? 0;
  // The books, through the gateway's own balance endpoint and the operator's usage export.
  await new Promise((res) => setTimeout(res, 1000));
  const balance = (await (await fetch(`${parley.url}/user/balance`, { headers: { authorization: `Bearer ${parley.key}` } })).json()).balance_infos[0];
  const csv = execFileSync(process.execPath, [join(ROOT, 'bin/parley.js'), 'usage', 'export', '--data-dir', parley.dataDir], { maxBuffer: 1 << 30, env: { ...process.env, REDIS_URL: '' } }).toString();
  const micros = (text) => Math.round(Number(text) * 1_000_000);
  // A CSV line's fields: a quoted one may hold commas (a failure's reason, an end user's name).
  const fields = (line) => [...line.matchAll(/("(?:[^"]|"")*"|[^,]*)(?:,|$)/g)].map((m) => m[1]).slice(0, -1);
  const [header, ...lines] = csv.trim().split('\n');
  const charged = fields(header).indexOf('charged');
  const charges = lines.reduce((sum, line) => sum + micros(fields(line)[charged]), 0);
  console.table([{
    seconds: OVERLOAD_SECONDS, connections: 512, served: count(200), '503': count(503), '429': count(429),
    'other errors': r.errors + Object.entries(byStatus).filter(([code]) => !['200', '503', '429'].includes(code)).reduce((n, [, v]) => n + v.count, 0),
    'p99 ms': r.latency.p99, 'peak RSS MiB': Math.round(peakRssMiB(parley.child.pid)),
    'open holds': balance.held_balance, 'grants - charges - balance (micro-units)': DEMO_CREDIT_MICROS - charges - micros(balance.total_balance),
  }]);
}

try {
  const { port: upstreamPort } = await forked('bench/fast-upstream.mjs', ['0']);
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  const { port: proxyPort } = await forked('bench/bare-proxy.mjs', [upstream, '0']);
  const parley = await startParley([benchModel(upstream)], { failover: { queueTimeoutMs: 200 } });
  const quiet = await startParley([benchModel(upstream)], { failover: { queueTimeoutMs: 200 }, requestLog: false });
  const earlier = REVISION && (await startParley([revisionModel(upstream)], { failover: { queueTimeoutMs: 200 } }, [], undefined, buildOf(REVISION)));
  const portkeyPort = await startPortkey();
  const targets = [
    ['direct', `${upstream}/v1`, {}],
    ['bare http-proxy-3', `http://127.0.0.1:${proxyPort}/v1`, {}],
    ['parley', `${parley.url}/v1`, { authorization: `Bearer ${parley.key}` }],
    ['parley, no log line', `${quiet.url}/v1`, { authorization: `Bearer ${quiet.key}` }],
    ...(earlier ? [[`parley at ${REVISION}`, `${earlier.url}/v1`, { authorization: `Bearer ${earlier.key}` }]] : []),
    ...(portkeyPort ? [['portkey', `http://127.0.0.1:${portkeyPort}/v1`, { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${upstream}/v1`, authorization: 'Bearer x' }]] : []),
  ];
  const rows = [];
  const ratios = Object.fromEntries(MODES.map((mode) => [mode, { bare: [], portkey: [], logged: [], earlier: [] }]));
  for (const mode of MODES) {
    const runs = new Map(targets.map(([name]) => [name, []]));
    for (const [, url, headers] of targets) await load(url, headers, mode, 32, WARMUP_SECONDS);
    for (let round = 0; round < ROUNDS; round++) {
      const reqs = {};
      // Alternate the order, so that no target always runs right after the same one.
      for (const [name, url, headers] of round % 2 ? [...targets].reverse() : targets) {
        const r = await load(url, headers, mode);
        reqs[name] = r.requests.average;
        runs.get(name).push({ 'req/s': Math.round(r.requests.average), 'p50 ms': r.latency.p50, 'p99 ms': r.latency.p99, non2xx: r.non2xx, errors: r.errors });
      }
      ratios[mode].bare.push(reqs.parley / reqs['bare http-proxy-3']);
      ratios[mode].logged.push(reqs.parley / reqs['parley, no log line']);
      if (reqs.portkey) ratios[mode].portkey.push(reqs.parley / reqs.portkey);
      if (earlier) ratios[mode].earlier.push(reqs[`parley at ${REVISION}`] / reqs['bare http-proxy-3']);
    }
    for (const [name, list] of runs) {
      const mid = [...list].sort((a, b) => a['req/s'] - b['req/s'])[Math.floor(list.length / 2)];
      rows.push({ mode, target: name, ...mid, 'req/s by round': list.map((r) => r['req/s']).join(' ') });
    }
  }
  console.table(rows);
  for (const mode of MODES) {
    const { bare, portkey, logged, earlier: before } = ratios[mode];
    const vsPortkey = portkey.length > 0 && mode === 'whole' ? `, parley / portkey = ${median(portkey).toFixed(2)}` : '';
    console.log(`${mode}: parley / bare pass-through = ${median(bare).toFixed(2)} (rounds: ${bare.map((x) => x.toFixed(2)).join(' ')})${vsPortkey}; with / without its log line = ${median(logged).toFixed(2)}`);
    if (before.length > 0) console.log(`${mode}: parley at ${REVISION} / bare pass-through = ${median(before).toFixed(2)} (rounds: ${before.map((x) => x.toFixed(2)).join(' ')})`);
  }
  if (OVERLOAD_SECONDS > 0) await overload(parley);
} finally {
  stopAll();
}
