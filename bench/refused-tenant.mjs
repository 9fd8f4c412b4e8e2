// What a tenant costs the others while every request it sends is refused:
// an agent without credit, or over its rate window, that retries at once
// (a loop without back-off is a common client bug). Each of its requests
// carries a 100 KB conversation, counted on a model with a tokenizer, behind
// an upstream whose first byte takes 20 ms. Another tenant sends short chat
// requests at 8 connections, alone and then beside the refused tenant's 8
// (sending each request as soon as the last is answered, or at a set rate);
// printed, the medians over the rounds: the other tenant's requests/s and
// p50/p99, the refused tenant's refusals/s, and the share of the main thread
// its refusals took (the thread's CPU, less what the other tenant's requests
// took alone, over the run's time). In this build and in a revision where one
// is named, taking turns.
//
//   npm run build && node bench/refused-tenant.mjs [seconds per run, 8] [rounds, 3] [revision, none] [refused requests a second, 0: at once]
import { join } from 'node:path';
import autocannon from 'autocannon';
import { ensureDefaultModel } from '../dist/engine/model-maker.js';
import { LOADS, ROOT, apiLoad, benchModel, buildOf, forked, mainThreadCpuMicros, median, startParley, stopAll } from './support.mjs';

const SECONDS = Number(process.argv[2] ?? 8);
const ROUNDS = Number(process.argv[3] ?? 3);
const REVISION = process.argv[4] && process.argv[4] !== 'none' ? process.argv[4] : undefined;
/** The refused tenant's requests a second, over its 8 connections; 0: each sent as soon as the last is answered. */
const RATE = Number(process.argv[5] ?? 0);
const ADMIN = 'bench-admin-token';
process.env.PARLEY_ADMIN_TOKEN = ADMIN;

const PROSE = 'Here is the function, with "quotes", a tab\t and a path C:\\work: function double(x) { return x * 2; }\n';
function conversation(kb) {
  const messages = [{ role: 'system', content: 'You are a coding agent. Use the tools to read and edit files. '.repeat(40) }];
  while (JSON.stringify(messages).length < kb * 1024) messages.push({ role: messages.length % 2 ? 'assistant' : 'user', content: `Turn ${messages.length}: ${PROSE.repeat(12)}` });
  return { model: 'counted', messages, max_tokens: 16, stream: false };
}

async function admin(gateway, method, path, body) {
  const res = await fetch(`${gateway.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** The refused tenant's load: 8 connections sending its 100 KB conversation, at RATE a second where one is set. */
function refusedLoad(base, headers) {
  const { path, body } = LOADS['counted 100 KB'];
  const rate = RATE > 0 ? { overallRate: RATE } : {};
  return new Promise((resolve, reject) => {
    autocannon({ url: base + path, method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), connections: 8, duration: SECONDS, ...rate }, (err, r) => (err ? reject(err) : resolve(r)));
  });
}

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0', '20']);
  const tokenizer = ensureDefaultModel(join(ROOT, '.parley-test', 'tokenizer.gguf'));
  const model = { ...benchModel(`http://127.0.0.1:${port}`), id: 'counted', contextWindow: 1_048_576, tokenizer: { gguf: tokenizer }, pricesPerMillion: { inputCacheMiss: 0.001, inputCacheHit: 0.001, output: 0.001 } };
  LOADS['counted short'] = { path: '/chat/completions', body: { ...LOADS.whole.body, model: 'counted' } };
  LOADS['counted 100 KB'] = { path: '/chat/completions', body: conversation(100) };
  const builds = [];
  for (const [name, root] of [['this build', ROOT], ...(REVISION ? [[REVISION, buildOf(REVISION)]] : [])]) {
    const p = await startParley([model], {}, [], undefined, root);
    const account = (email, credit) => admin(p, 'POST', '/accounts', { email, ...(credit ? { credit } : {}) });
    const dry = await account('dry@bench.example');
    const limited = await account('limited@bench.example', '1000');
    await admin(p, 'PUT', `/accounts/${limited.account.id}/rate-limits`, { requestsPerMinute: 5, tokensPerMinute: null });
    const bearer = (made) => ({ authorization: `Bearer ${made.apiKey}` });
    const good = { authorization: `Bearer ${p.key}` };
    await apiLoad(`${p.url}/v1`, good, 'counted short', 8, 4);
    builds.push({ name, p, good, refused: { 'no credit': bearer(dry), 'over its rate window': bearer(limited) } });
  }
  const runs = [];
  for (let round = 0; round < ROUNDS; round++) {
    for (const { name, p, good, refused } of round % 2 ? [...builds].reverse() : builds) {
      const url = `${p.url}/v1`;
      let before = mainThreadCpuMicros(p.child.pid);
      const alone = await apiLoad(url, good, 'counted short', 8, SECONDS);
      const perShort = (mainThreadCpuMicros(p.child.pid) - before) / alone.requests.total;
      runs.push({ build: name, beside: 'nothing', short: alone, errors: alone.errors + alone.non2xx });
      for (const [why, h] of Object.entries(refused)) {
        before = mainThreadCpuMicros(p.child.pid);
        const [short, bad] = await Promise.all([apiLoad(url, good, 'counted short', 8, SECONDS), refusedLoad(url, h)]);
        const refusalsCpu = mainThreadCpuMicros(p.child.pid) - before - perShort * short.requests.total;
        const refusals = bad.statusCodeStats[why === 'no credit' ? '402' : '429']?.count ?? 0;
        runs.push({ build: name, beside: why, short, refusals, share: refusalsCpu / (SECONDS * 1e6), errors: short.errors + short.non2xx + bad.errors + bad.non2xx - refusals });
      }
    }
  }
  const rows = [];
  for (const { name } of builds) {
    for (const beside of ['nothing', 'no credit', 'over its rate window']) {
      const rs = runs.filter((r) => r.build === name && r.beside === beside);
      const of = (f) => median(rs.map(f));
      rows.push({
        build: name,
        'refused tenant': beside,
        'other tenant: req/s': Math.round(of((r) => r.short.requests.average)),
        'p50 / p99 ms': `${of((r) => r.short.latency.p50)} / ${of((r) => r.short.latency.p99)}`,
        'refusals/s': beside === 'nothing' ? '' : Math.round(of((r) => r.refusals) / SECONDS),
        'main thread taken': beside === 'nothing' ? '' : `${Math.round(of((r) => r.share) * 100)}%`,
        errors: rs.reduce((sum, r) => sum + r.errors, 0),
      });
    }
  }
  console.table(rows);
} finally {
  stopAll();
}
