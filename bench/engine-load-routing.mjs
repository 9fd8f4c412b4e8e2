// Routing on what the engines report, against routing on Parley's own
// counts: four simulated vLLM engines (vllm-sim-engine.mjs: 8 sequences at
// once, a waiting queue, a KV budget with a prefix cache, prefill time by
// uncached tokens, preemption) behind 1 and 3 Parley replicas on one Redis,
// each scenario run on a build of REVISION (default c3abe6d, the last before
// engine load) and on this build, in the same run. Streamed requests; time
// to first token is to the first text. Scenarios:
//
// (a) external: 8 tenants' short chats (300-word system prompts), 8 in
//     flight, alone and then beside 24 long requests sent straight to engine
//     0 (another team's job). Goals: p90 beside it within 1.5x of alone;
//     under 10% of Parley's requests to engine 0.
// (b) kv: 8 agent sessions (prompt_cache_key, 2,000 words growing 500 a
//     turn) beside 16 loops of short chats, engines of 1,024 blocks (16k
//     tokens). Goal: no engine above 0.95 KV use while another is under 0.5
//     for more than 2 s (the longest such stretch is printed); preemptions.
// (c) neighbour: one agent session alone (20 turns, prompt_cache_key), then
//     another while a neighbour whose key has the same home floods it (10
//     in flight, 200-token replies, on engines of 4 sequences: within
//     Parley's load bound, the home queues). Goals: the session's cache
//     share at least 0.85 of ideal (one cache for everything), p90 within 2x
//     alone.
//
//   npm run build && node bench/engine-load-routing.mjs [seconds per phase, 15] [REVISION, c3abe6d] [scenarios, a,b,c] [replicas, 1,3]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildOf, forked, ROOT, startParley, stopAll } from './support.mjs';
import { setTimeout as sleep } from 'node:timers/promises';

const SECONDS = Number(process.argv[2] ?? 15);
const REVISION = process.argv[3] ?? 'c3abe6d';
const SCENARIOS = (process.argv[4] ?? 'a,b,c').split(',');
const REPLICAS = (process.argv[5] ?? '1,3').split(',').map(Number);
const ENGINES = 4;
const NEIGHBOUR_IN_FLIGHT = 10;
const WORDS = 'the a gateway token cache stream model reply prompt team cluster request answer system user route price credit key balance engine'.split(' ');

function words(seed, count, opening = '') {
  let s = seed;
  const out = opening ? [opening] : [];
  while (out.length < count) out.push(WORDS[(s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % WORDS.length]);
  return out.join(' ');
}

const percentile = (xs, p) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))] : NaN);
const ms = (x) => Math.round(x);

/** One streamed chat request; resolves to its time to first text, the engine (port) that served it and its usage. */
async function streamed(base, key, body, signal) {
  const started = performance.now();
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true }, ...body }),
    signal,
  });
  if (!res.ok) return { failed: `${res.status} ${await res.text()}` };
  let ttft;
  let port;
  let usage;
  let buffer = '';
  for await (const piece of res.body) {
    buffer += Buffer.from(piece).toString('utf8');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith('data: {')) continue;
      const chunk = JSON.parse(event.slice(6));
      const text = chunk.choices?.[0]?.delta?.content;
      if (text && ttft === undefined) {
        ttft = performance.now() - started;
        port = text.trim();
      }
      if (chunk.usage) usage = chunk.usage;
    }
  }
  return { ttft, port, usage };
}

/** `loops` loops, each sending `next(i)`'s request when its last one ends, until `until()`; resolves to the results. */
async function loops(count, send, until) {
  const results = [];
  await Promise.all(Array.from({ length: count }, async (_, loop) => {
    for (let i = 0; !until(); i++) {
      const r = await send(loop, i).catch((err) => ({ failed: String(err) }));
      if (r) results.push(r);
    }
  }));
  return results;
}

/** Keeps `count` long requests on an engine, straight to it, until stopped. */
function direct(port, count) {
  const abort = new AbortController();
  const done = loops(count, (loop, i) => streamed(`http://127.0.0.1:${port}/v1`, undefined, { messages: [{ role: 'user', content: words(loop * 7777 + i, 200, `job ${loop}.${i}`) }], max_tokens: 400 }, abort.signal), () => abort.signal.aborted);
  return () => (abort.abort(), done);
}

async function setUp(root, replicas, kvBlocks, maxSeqs = 8) {
  const engines = await Promise.all(Array.from({ length: ENGINES }, () => forked('bench/vllm-sim-engine.mjs', ['0', String(maxSeqs), String(kvBlocks), '0.05', '20'])));
  // The engines' prefill rate as Parley counts a prompt without a tokenizer (3 bytes a token; these engines' tokens
  // are words, about 6.6 bytes each, read at 20,000 a second): about 44,000 tokens a second, for a build that has
  // the setting.
  const knowsPrefillRate = readFileSync(join(root, 'dist/config.js'), 'utf8').includes('prefillTokensPerSecond');
  const routing = knowsPrefillRate ? { prefillTokensPerSecond: 44_000 } : {};
  const models = [{
    id: 'm', contextWindow: 65536, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, routing,
    endpoints: engines.map((e) => ({ kind: 'vllm', url: `http://127.0.0.1:${e.port}/v1` })),
  }];
  const settings = { health: { probe: { intervalMs: 0 } } };
  const gateways = [await startParley(models, settings, [], undefined, root)];
  while (gateways.length < replicas) gateways.push(await startParley(models, settings, [], gateways[0], root));
  const ports = engines.map((e) => String(e.port));
  let turn = 0;
  const gateway = () => gateways[turn++ % gateways.length];
  const send = (body) => {
    const g = gateway();
    return streamed(`${g.url}/v1`, g.key, body);
  };
  const sim = () => Promise.all(engines.map(async (e) => (await fetch(`http://127.0.0.1:${e.port}/sim`)).json()));
  const stop = () => {
    for (const g of [...gateways].reverse()) g.child.kill('SIGTERM');
    for (const e of engines) e.child.kill('SIGTERM');
  };
  return { ports, send, sim, stop };
}

const ttftColumns = (rs) => {
  const t = rs.filter((r) => r.ttft !== undefined).map((r) => r.ttft);
  return { 'ttft p50': ms(percentile(t, 0.5)), 'ttft p90': ms(percentile(t, 0.9)), 'ttft p99': ms(percentile(t, 0.99)), failed: rs.filter((r) => r.failed).length };
};

const tenantChat = (i) => {
  const tenant = i % 8;
  return { messages: [{ role: 'system', content: words(tenant + 1, 300, `You serve tenant ${tenant}.`) }, { role: 'user', content: words(i * 31 + 5, 20, `Question ${i}.`) }], max_tokens: 32 };
};

async function external(root, replicas) {
  const setup = await setUp(root, replicas, 4096);
  try {
    // Each tenant's prompt cached first, so that alone is not measured from cold caches.
    for (let i = 0; i < 8; i++) await setup.send(tenantChat(i));
    let end = performance.now() + SECONDS * 1000;
    let n = 8;
    const alone = await loops(8, () => setup.send(tenantChat(n++)), () => performance.now() > end);
    const stopDirect = direct(setup.ports[0], 24);
    await sleep(3000);
    end = performance.now() + SECONDS * 1000;
    const beside = await loops(8, () => setup.send(tenantChat(n++)), () => performance.now() > end);
    await stopDirect();
    const a = ttftColumns(alone);
    const b = ttftColumns(beside);
    return {
      'p90 alone': a['ttft p90'], 'p50 beside': b['ttft p50'], 'p90 beside': b['ttft p90'], 'p99 beside': b['ttft p99'],
      'p90 ÷ alone': +(b['ttft p90'] / a['ttft p90']).toFixed(2),
      'to engine 0': +(beside.filter((r) => r.port === setup.ports[0]).length / beside.length).toFixed(3),
      requests: `${alone.length}+${beside.length}`, failed: a.failed + b.failed,
    };
  } finally {
    setup.stop();
  }
}

/** An agent session's turns: its own context growing `grow` words a turn, sent with its key. */
function sessionTurn(session, turn, { start = 2000, grow = 500, tokens = 64 } = {}) {
  const messages = [{ role: 'system', content: words(session * 101 + 3, start, `Agent session ${session}.`) }];
  for (let t = 1; t <= turn; t++) messages.push({ role: 'assistant', content: `turn ${t} done` }, { role: 'user', content: words(session * 1000 + t, grow, `Tool result ${t}.`) });
  return { messages, max_tokens: tokens, prompt_cache_key: `session-${session}` };
}

/** The longest stretch, in seconds, of samples where one engine is above 0.95 KV use while another is under 0.5. */
function longestImbalance(kvSeries) {
  const length = Math.min(...kvSeries.map((s) => s.length));
  const aligned = kvSeries.map((s) => s.slice(s.length - length));
  let longest = 0;
  let current = 0;
  for (let i = 0; i < length; i++) {
    const at = aligned.map((s) => s[i]);
    current = Math.max(...at) > 0.95 && Math.min(...at) < 0.5 ? current + 1 : 0;
    longest = Math.max(longest, current);
  }
  return longest / 10;
}

async function kv(root, replicas) {
  const setup = await setUp(root, replicas, 1024);
  try {
    const end = performance.now() + SECONDS * 1000;
    const until = () => performance.now() > end;
    const [agents, chats] = await Promise.all([
      loops(8, (session, turn) => (turn < 10 ? setup.send(sessionTurn(session, turn)) : sleep(100).then(() => undefined)), until),
      loops(16, (loop, i) => setup.send({ messages: [{ role: 'user', content: words(loop * 313 + i, 100, `chat ${loop}.${i}`) }], max_tokens: 16 }), until),
    ]);
    const sims = await setup.sim();
    const samples = sims.map((s) => s.kv.slice(-SECONDS * 10));
    const prompt = agents.reduce((sum, r) => sum + (r.usage?.prompt_tokens ?? 0), 0);
    const cachedTokens = agents.reduce((sum, r) => sum + (r.usage?.prompt_tokens_details?.cached_tokens ?? 0), 0);
    return {
      ...ttftColumns([...agents, ...chats]),
      'agent ttft p90': ms(percentile(agents.filter((r) => r.ttft).map((r) => r.ttft), 0.9)),
      preemptions: sims.reduce((sum, s) => sum + s.preemptions, 0),
      'longest imbalance s': longestImbalance(samples),
      'kv mean per engine': samples.map((s) => (s.reduce((a, b) => a + b, 0) / s.length).toFixed(2)).join(' '),
      'kv max per engine': samples.map((s) => Math.max(...s).toFixed(2)).join(' '),
      'agent cached share': +(cachedTokens / prompt).toFixed(3),
      requests: agents.length + chats.length,
    };
  } finally {
    setup.stop();
  }
}

/**
 * The session's turns one after another; its cache share against the ideal (each turn's prompt cached up to the
 * last turn's; given `warm`, the first turn's too, as the fleet has seen it before).
 */
async function sessionRun(setup, session, turns, warm = false) {
  const results = [];
  for (let t = 0; t < turns; t++) results.push(await setup.send(sessionTurn(session, t, { start: 1500, grow: 300, tokens: 16 })));
  let previous = warm ? (results[0].usage?.prompt_tokens ?? 1) - 1 : 0;
  let ideal = 0;
  let cachedTokens = 0;
  for (const r of results) {
    ideal += Math.floor(previous / 16) * 16;
    cachedTokens += r.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    previous = r.usage?.prompt_tokens ?? 0;
  }
  return { results, share: cachedTokens / ideal };
}

async function neighbour(root, replicas) {
  // Engines of 4 sequences, so that the neighbour's share of the load bound (the mean plus 4) queues at home.
  const setup = await setUp(root, replicas, 4096, 4);
  try {
    const TURNS = 20;
    const alone = await sessionRun(setup, 1, TURNS);
    // A key whose home is session 2's: its neighbour, found by trying keys. A key's home may change once as the
    // fleet shares the order it first saw keys in (routing/prefix-sharing.ts), so both are asked again after that.
    const where = async (body) => (await setup.send(body)).port;
    const sessionHome = () => where(sessionTurn(2, 0, { start: 1500, grow: 300, tokens: 1 }));
    const neighbourHome = (k) => where({ messages: [{ role: 'user', content: `probe ${k}` }], max_tokens: 1, prompt_cache_key: `neighbour-${k}` });
    let home = await sessionHome();
    let neighbourKey;
    for (let k = 0; k < 64 && !neighbourKey; k++) {
      if ((await neighbourHome(k)) !== home) continue;
      await sleep(500);
      const [again, sessionAgain] = [await neighbourHome(k), await sessionHome()];
      if (again === home && sessionAgain === home) neighbourKey = `neighbour-${k}`;
      home = sessionAgain;
    }
    let flooding = true;
    const flood = loops(NEIGHBOUR_IN_FLIGHT, (loop, i) => setup.send({ messages: [{ role: 'system', content: words(99, 300, 'The neighbour.') }, { role: 'user', content: words(loop * 57 + i, 50, `n ${loop}.${i}`) }], max_tokens: 200, prompt_cache_key: neighbourKey }), () => !flooding);
    await sleep(3000);
    const beside = await sessionRun(setup, 2, TURNS, true);
    flooding = false;
    const floodResults = await flood;
    const tAlone = alone.results.map((r) => r.ttft).filter(Boolean);
    const tBeside = beside.results.map((r) => r.ttft).filter(Boolean);
    return {
      'p90 alone': ms(percentile(tAlone, 0.9)), 'p90 flooded': ms(percentile(tBeside, 0.9)),
      'p90 ÷ alone': +(percentile(tBeside, 0.9) / percentile(tAlone, 0.9)).toFixed(2),
      'share ÷ ideal alone': +alone.share.toFixed(3), 'share ÷ ideal flooded': +beside.share.toFixed(3),
      'turns at home': beside.results.filter((r) => r.port === home).length,
      'engines used': new Set(beside.results.map((r) => r.port)).size,
      'neighbour found': Boolean(neighbourKey), 'neighbour requests': floodResults.length,
    };
  } finally {
    setup.stop();
  }
}

const RUNS = { a: ['(a) external load on engine 0', external], b: ['(b) long agent sessions beside short chats', kv], c: ['(c) a session whose home a neighbour floods', neighbour] };

try {
  const builds = [[REVISION, buildOf(REVISION)], ['this build', ROOT]];
  for (const scenario of SCENARIOS) {
    const [title, run] = RUNS[scenario];
    const rows = [];
    for (const replicas of REPLICAS) for (const [label, root] of builds) rows.push({ build: label, replicas, ...(await run(root, replicas)) });
    console.log(title);
    console.table(rows);
  }
} finally {
  stopAll();
}
