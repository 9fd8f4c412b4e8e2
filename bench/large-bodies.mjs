// What a request's size costs: an agent's turn carries its whole
// conversation (Claude Code's and Codex's run to hundreds of KB), and Parley
// reads every byte of it on its main thread (decodes it, parses it, checks
// it, bounds its prompt, writes the upstream's body and encodes it), where
// a pass-through copies bytes. The same fast scripted upstream called
// directly, through the bare http-proxy-3 pass-through and through Parley,
// taking turns (the order reversed every other round), with chat bodies of
// each size (a long conversation of prose and code: ASCII, or with one turn
// in ten of accented and CJK text), short whole replies; the medians over
// the rounds of requests/s, p50/p99 and the main-thread CPU per request.
//
// Then, on a model with a tokenizer (Parley's own GGUF, as the quickstart's
// model has), which counts each prompt up to 128 KB exactly, behind an
// upstream whose first byte takes 20 ms: short chat requests at 8
// connections alone, then beside one connection sending 100 KB
// conversations, in this build and in a revision where one is named, taking
// turns (the other tenants' p50/p99 while one tenant's turns are counted).
//
//   npm run build && node bench/large-bodies.mjs [sizes in KB, 10,100,300] [connections, 1] [seconds per run, 6] [rounds, 3] [revision, none]
import { join } from 'node:path';
import { ensureDefaultModel } from '../dist/engine/model-maker.js';
import { LOADS, ROOT, apiLoad, benchModel, buildOf, forked, mainThreadCpuMicros, median, startParley, stopAll } from './support.mjs';

const SIZES_KB = (process.argv[2] ?? '10,100,300').split(',').map(Number);
const CONNECTIONS = Number(process.argv[3] ?? 1);
const SECONDS = Number(process.argv[4] ?? 6);
const ROUNDS = Number(process.argv[5] ?? 3);
const REVISION = process.argv[6] && process.argv[6] !== 'none' ? process.argv[6] : undefined;

const PROSE = 'Here is the function, with "quotes", a tab\t and a path C:\\work: function double(x) { return x * 2; }\n';
const MIXED = 'Voilà le résumé: naïve façade, Übergröße, 漢字とかな, 한국어. function double(x) { return x * 2; }\n';

/** A chat request whose conversation is about `kb` KB of JSON; `mixed`: one turn in ten not ASCII. */
function conversation(kb, mixed) {
  const messages = [{ role: 'system', content: 'You are a coding agent. Use the tools to read and edit files. '.repeat(40) }];
  while (JSON.stringify(messages).length < kb * 1024) {
    const i = messages.length;
    messages.push({ role: i % 2 ? 'assistant' : 'user', content: `Turn ${i}: ${(mixed && i % 10 === 0 ? MIXED : PROSE).repeat(12)}` });
  }
  return { model: 'bench', messages, max_tokens: 16, stream: false };
}

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0']);
  const upstream = `http://127.0.0.1:${port}`;
  const proxy = await forked('bench/bare-proxy.mjs', [upstream, '0']);
  const parley = await startParley([benchModel(upstream)]);
  const targets = [
    { name: 'direct', url: `${upstream}/v1`, headers: {} },
    { name: 'pass-through', url: `http://127.0.0.1:${proxy.port}/v1`, headers: {}, pid: proxy.child.pid },
    { name: 'parley', url: `${parley.url}/v1`, headers: { authorization: `Bearer ${parley.key}` }, pid: parley.child.pid },
  ];
  const rows = [];
  for (const kb of SIZES_KB) {
    for (const mixed of [false, true]) {
      const mode = `${kb} KB ${mixed ? 'mixed' : 'ASCII'}`;
      LOADS[mode] = { path: '/chat/completions', body: conversation(kb, mixed) };
      const bytes = Buffer.byteLength(JSON.stringify(LOADS[mode].body));
      for (const t of targets) await apiLoad(t.url, t.headers, mode, CONNECTIONS, 4);
      const runs = new Map(targets.map((t) => [t, []]));
      for (let round = 0; round < ROUNDS; round++) {
        for (const t of round % 2 ? [...targets].reverse() : targets) {
          const cpuBefore = t.pid ? mainThreadCpuMicros(t.pid) : 0;
          const r = await apiLoad(t.url, t.headers, mode, CONNECTIONS, SECONDS);
          const cpu = t.pid ? (mainThreadCpuMicros(t.pid) - cpuBefore) / r.requests.total : undefined;
          runs.get(t).push({ rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, cpu, errors: r.errors + r.non2xx });
        }
      }
      for (const [t, rs] of runs) {
        const of = (f) => median(rs.map(f));
        rows.push({
          body: mode,
          bytes,
          target: t.name,
          'req/s': Math.round(of((r) => r.rps)),
          'p50 ms': of((r) => r.p50),
          'p99 ms': of((r) => r.p99),
          'main-thread µs/req': t.pid ? Math.round(of((r) => r.cpu)) : '',
          errors: rs.reduce((sum, r) => sum + r.errors, 0),
        });
      }
    }
  }
  console.table(rows);

  // Other tenants beside one tenant's counted agent turns, behind an upstream whose first byte takes 20 ms, as a
  // GPU's; prices low enough that the demo credit pays for them all.
  const { port: gpuPort } = await forked('bench/fast-upstream.mjs', ['0', '20']);
  const tokenizer = ensureDefaultModel(join(ROOT, '.parley-test', 'tokenizer.gguf'));
  const counted = { ...benchModel(`http://127.0.0.1:${gpuPort}`), id: 'counted', contextWindow: 1_048_576, tokenizer: { gguf: tokenizer }, pricesPerMillion: { inputCacheMiss: 0.001, inputCacheHit: 0.001, output: 0.001 } };
  LOADS['counted short'] = { path: '/chat/completions', body: { ...LOADS.whole.body, model: 'counted' } };
  LOADS['counted 100 KB'] = { path: '/chat/completions', body: { ...conversation(100, false), model: 'counted' } };
  const builds = [];
  for (const [name, root] of [['this build', ROOT], ...(REVISION ? [[REVISION, buildOf(REVISION)]] : [])]) {
    const p = await startParley([counted], {}, [], undefined, root);
    const h = { authorization: `Bearer ${p.key}` };
    await Promise.all([apiLoad(`${p.url}/v1`, h, 'counted short', 8, 4), apiLoad(`${p.url}/v1`, h, 'counted 100 KB', 1, 4)]);
    builds.push({ name, url: `${p.url}/v1`, h });
  }
  const beside = [];
  for (let round = 0; round < ROUNDS; round++) {
    for (const { name, url, h } of round % 2 ? [...builds].reverse() : builds) {
      const alone = await apiLoad(url, h, 'counted short', 8, SECONDS);
      const [short, long] = await Promise.all([apiLoad(url, h, 'counted short', 8, SECONDS), apiLoad(url, h, 'counted 100 KB', 1, SECONDS)]);
      beside.push({
        build: name,
        round: round + 1,
        'short alone: req/s': Math.round(alone.requests.average),
        'p50 / p99 ms': `${alone.latency.p50} / ${alone.latency.p99}`,
        'short beside 100 KB turns: req/s': Math.round(short.requests.average),
        'p50 / p99 / max ms': `${short.latency.p50} / ${short.latency.p99} / ${short.latency.max}`,
        '100 KB turns/s': Math.round(long.requests.average * 10) / 10,
        errors: alone.errors + alone.non2xx + short.errors + short.non2xx + long.errors + long.non2xx,
      });
    }
  }
  console.table(beside);
} finally {
  stopAll();
}
