// Where prefix routing puts requests as a fleet is deployed: N Parley
// replicas on one Redis (the client spreading requests over them, as a load
// balancer would), in front of 4 upstream replicas of one model whose prefix
// caches are an engine's (block-cache-upstream.mjs: blocks of 16 tokens
// keyed by their whole prefix, least recently used evicted), 8 requests in
// flight. Two workloads:
//
// - tenants: 8 tenants, each with a 400-word system prompt, asking short
//   unique questions in a seeded random order; each cache holds 2 tenants'
//   prompts (with a quarter to spare).
// - agents: 24 coding-agent sessions sharing one 1,500-word system prompt,
//   8 turns each (each turn adds an 80-word reply and a 220-word tool
//   result), the sessions interleaved; each cache holds its fair share of
//   the sessions (6, grown to their last turn) with a quarter to spare. With
//   no hint (the conversation itself routes), with `prompt_cache_key` (the
//   session id, as Codex sends it), and round robin as the floor.
//
// Per run: the share of prompt tokens served from cache, the ideal share
// (every block an earlier request made a hit, as one cache with room for
// everything would give) and their ratio; for agents the same ratio for the
// conversation past the shared system prompt, and for tenants the ratio in
// the first second; the requests each upstream served, max ÷ mean, how many
// upstreams served each session (mean, max) and the wall time.
//
//   npm run build && node bench/prefix-routing.mjs [tenant requests, default 480]
import { forked, startParley, stopAll } from './support.mjs';
import { BLOCK_TOKENS, BlockCache, promptTokens } from './block-cache-upstream.mjs';

const TENANT_REQUESTS = Number(process.argv[2] ?? 480);
const UPSTREAMS = 4;
const IN_FLIGHT = 8;
const SLACK = 1.25;

const WORDS = 'the a gateway token cache stream model reply prompt team cluster request answer system user route price credit key balance engine'.split(' ');

function random(seed) {
  return () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

/** `count` seeded words, different per seed: a prompt's text. */
function words(seed, count, opening = '') {
  const next = random(seed);
  const out = opening ? [opening] : [];
  while (out.length < count) out.push(WORDS[Math.floor(next() * WORDS.length)]);
  return out.join(' ');
}

const blocksOf = (messages) => Math.ceil(promptTokens(messages).length / BLOCK_TOKENS);

/** Each session is a list of turns, each turn a whole conversation; tenants' sessions have one turn. */
function tenantWorkload(run) {
  const prompts = Array.from({ length: 8 }, (_, t) => words(run * 7919 + t * 104729 + 1, 400, `You are the assistant of tenant ${t} (run ${run}).`));
  const next = random(12345);
  const sessions = Array.from({ length: TENANT_REQUESTS }, (_, i) => [[
    { role: 'system', content: prompts[Math.floor(next() * prompts.length)] },
    { role: 'user', content: `Question ${i}: what does the ${WORDS[i % WORDS.length]} do?` },
  ]]);
  const capacity = Math.ceil(2 * blocksOf(sessions[0][0]) * SLACK);
  return { sessions, capacity, sharedTokens: 0 };
}

function agentWorkload(run) {
  const system = { role: 'system', content: words(run * 31 + 7, 1500, `You are a coding agent (run ${run}).`) };
  const sessions = Array.from({ length: 24 }, (_, s) => {
    const conversation = [system, { role: 'user', content: `Task ${s}: ${words(run * 1000 + s, 40)}` }];
    const turns = [[...conversation]];
    for (let t = 1; t < 8; t++) {
      conversation.push({ role: 'assistant', content: words(run * 1e5 + s * 100 + t, 80) }, { role: 'user', content: `Tool result ${t}: ${words(run * 1e6 + s * 100 + t, 220)}` });
      turns.push([...conversation]);
    }
    return turns;
  });
  const shared = promptTokens([system]).length;
  const sessionBlocks = blocksOf(sessions[0].at(-1)) - Math.floor(shared / BLOCK_TOKENS);
  const capacity = Math.ceil((Math.floor(shared / BLOCK_TOKENS) + (sessions.length / UPSTREAMS) * sessionBlocks) * SLACK);
  return { sessions, capacity, sharedTokens: shared };
}

async function run(index, workload, { policy, hint }, gatewayCount) {
  const { sessions, capacity, sharedTokens } = workload(index);
  const upstreams = await Promise.all(Array.from({ length: UPSTREAMS }, () => forked('bench/block-cache-upstream.mjs', ['0', String(capacity)])));
  const models = [{
    id: 'm', contextWindow: 32768, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, routing: { policy },
    endpoints: upstreams.map((u) => ({ kind: 'vllm', url: `http://127.0.0.1:${u.port}/v1` })),
  }];
  const settings = { health: { probe: { intervalMs: 0 } } };
  const gateways = [await startParley(models, settings)];
  while (gateways.length < gatewayCount) gateways.push(await startParley(models, settings, [], gateways[0]));

  // Sessions take turns: a session's next turn is sent once its last one is answered.
  const ready = sessions.map((turns, session) => ({ session, turns, next: 0 }));
  const done = [];
  let sent = 0;
  const started = performance.now();
  const worker = async () => {
    while (ready.length > 0) {
      const s = ready.shift();
      const messages = s.turns[s.next++];
      const order = sent++;
      const at = performance.now() - started;
      const gateway = gateways[order % gatewayCount];
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.key}` },
        body: JSON.stringify({ model: 'm', max_tokens: 4, messages, ...(hint ? { prompt_cache_key: `session-${s.session}` } : {}) }),
      });
      const body = await res.json();
      if (!res.ok) throw new Error(`session ${s.session}: ${res.status} ${JSON.stringify(body)}`);
      done.push({ order, at, session: s.session, messages, upstream: body.choices[0].message.content, prompt: body.usage.prompt_tokens, cached: body.usage.prompt_tokens_details.cached_tokens });
      if (s.next < s.turns.length) ready.push(s);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const wall = (performance.now() - started) / 1000;
  // The first replica last: it owns the private Redis the others use.
  for (const g of [...gateways].reverse()) g.child.kill('SIGTERM');
  for (const u of upstreams) u.child.kill('SIGTERM');

  // The ideal: one cache with room for everything, the requests in the order they were sent.
  const everything = new BlockCache(Infinity);
  for (const r of [...done].sort((a, b) => a.order - b.order)) r.ideal = everything.serve(promptTokens(r.messages));
  const sum = (rs, f) => rs.reduce((total, r) => total + f(r), 0);
  const ratio = (rs, f = (x) => x) => sum(rs, (r) => f(r.cached)) / sum(rs, (r) => f(r.ideal));
  const perUpstream = upstreams.map((u) => done.filter((r) => r.upstream === String(u.port)).length);
  const upstreamsPerSession = sessions.map((_, s) => new Set(done.filter((r) => r.session === s).map((r) => r.upstream)).size);
  const row = {
    policy: hint ? `${policy}, prompt_cache_key` : policy, N: gatewayCount,
    'cached share': +(sum(done, (r) => r.cached) / sum(done, (r) => r.prompt)).toFixed(3),
    'ideal share': +(sum(done, (r) => r.ideal) / sum(done, (r) => r.prompt)).toFixed(3),
    '÷ ideal': +ratio(done).toFixed(3),
  };
  if (sharedTokens > 0) row['conversation ÷ ideal'] = +ratio(done, (cached) => Math.max(0, cached - sharedTokens)).toFixed(3);
  else row['first second ÷ ideal'] = +ratio(done.filter((r) => r.at < 1000)).toFixed(3);
  Object.assign(row, {
    'requests per upstream': perUpstream.join(' '),
    'max ÷ mean': +(Math.max(...perUpstream) / (done.length / UPSTREAMS)).toFixed(2),
    ...(sharedTokens > 0 ? { 'upstreams per session': `${(sum(upstreamsPerSession, (n) => n) / sessions.length).toFixed(2)} (max ${Math.max(...upstreamsPerSession)})` } : {}),
    'wall s': +wall.toFixed(1),
  });
  return row;
}

try {
  let index = 0;
  const tenants = [];
  for (const gatewayCount of [1, 3]) {
    for (const variant of [{ policy: 'prefix-affinity' }, { policy: 'round-robin' }]) tenants.push(await run(index++, tenantWorkload, variant, gatewayCount));
  }
  const agents = [];
  for (const gatewayCount of [1, 3]) {
    for (const variant of [{ policy: 'prefix-affinity' }, { policy: 'prefix-affinity', hint: true }, { policy: 'round-robin' }]) agents.push(await run(index++, agentWorkload, variant, gatewayCount));
  }
  console.log(`Tenants: ${UPSTREAMS} upstreams with engine-like block caches for 2 tenants' prompts each, 8 tenants with 400-word system prompts, ${TENANT_REQUESTS} questions, ${IN_FLIGHT} in flight, N Parley replicas on one Redis`);
  console.table(tenants);
  console.log(`Agents: ${UPSTREAMS} upstreams with block caches for 6 sessions each, 24 sessions sharing a 1,500-word system prompt, 8 turns each, ${IN_FLIGHT} in flight`);
  console.table(agents);
} finally {
  stopAll();
}
