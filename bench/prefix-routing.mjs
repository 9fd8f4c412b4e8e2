// Prefix affinity against the other policies as a fleet is deployed: N
// Parley replicas on one Redis (the client spreading requests over them, as
// a load balancer would), in front of 4 upstream replicas of one model whose
// prompt caches hold only their K most recent prompts
// (tight-cache-upstream.mjs). 8 tenants, each with a ~400-word system
// prompt and short unique user turns, in a seeded random order, 8 in flight.
// Per policy, N and K: the share of prompt tokens served from upstream
// caches, the ideal share (every repeated prefix a hit, as one upstream with
// room for every prompt would give), the requests each upstream served and
// the wall time.
//
//   npm run build && node bench/prefix-routing.mjs [requests, default 240]
import { forked, startParley, stopAll } from './support.mjs';
import { promptTokens, sharedPrefix } from './tight-cache-upstream.mjs';

const REQUESTS = Number(process.argv[2] ?? 240);
const UPSTREAMS = 4;
const TENANTS = 8;
const IN_FLIGHT = 8;
const SYSTEM_WORDS = 400;
const POLICIES = ['round-robin', 'least-load', 'prefix-affinity'];

const WORDS = 'the a gateway token cache stream model reply prompt team cluster request answer system user route price credit key balance engine'.split(' ');

function random(seed) {
  return () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

/** A tenant's system prompt of SYSTEM_WORDS words, different per tenant and per run. */
function systemPrompt(run, tenant) {
  const next = random(run * 7919 + tenant * 104729 + 1);
  const words = [`You are the assistant of tenant ${tenant} (run ${run}).`];
  while (words.length < SYSTEM_WORDS) words.push(WORDS[Math.floor(next() * WORDS.length)]);
  return words.join(' ');
}

/** The cached share a cache with room for every prompt would give: each request's longest prefix shared with any earlier one. */
function idealShare(requests) {
  const seen = [];
  let prompt = 0;
  let cached = 0;
  for (const messages of requests) {
    const tokens = promptTokens(messages);
    prompt += tokens.length;
    cached += Math.max(0, ...seen.map((p) => sharedPrefix(p, tokens)));
    seen.push(tokens);
  }
  return cached / prompt;
}

async function run(index, policy, gatewayCount, capacity) {
  const upstreams = await Promise.all(Array.from({ length: UPSTREAMS }, () => forked('bench/tight-cache-upstream.mjs', ['0', String(capacity)])));
  const models = [{
    id: 'm', contextWindow: 32768, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, routing: { policy },
    endpoints: upstreams.map((u) => ({ kind: 'vllm', url: `http://127.0.0.1:${u.port}/v1` })),
  }];
  const settings = { health: { probe: { intervalMs: 0 } } };
  const gateways = [await startParley(models, settings)];
  while (gateways.length < gatewayCount) gateways.push(await startParley(models, settings, [], gateways[0]));
  const prompts = Array.from({ length: TENANTS }, (_, t) => systemPrompt(index, t));
  const next = random(12345);
  const requests = Array.from({ length: REQUESTS }, (_, i) => [
    { role: 'system', content: prompts[Math.floor(next() * TENANTS)] },
    { role: 'user', content: `Question ${i}: what does the ${WORDS[i % WORDS.length]} do?` },
  ]);
  let taken = 0;
  let prompt = 0;
  let cached = 0;
  const started = performance.now();
  const worker = async () => {
    while (taken < REQUESTS) {
      const i = taken++;
      const gateway = gateways[i % gatewayCount];
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.key}` },
        body: JSON.stringify({ model: 'm', max_tokens: 4, messages: requests[i] }),
      });
      const body = await res.json();
      if (!res.ok) throw new Error(`request ${i}: ${res.status} ${JSON.stringify(body)}`);
      prompt += body.usage.prompt_tokens;
      cached += body.usage.prompt_tokens_details.cached_tokens;
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const wall = (performance.now() - started) / 1000;
  const served = await Promise.all(upstreams.map(async (u) => (await (await fetch(`http://127.0.0.1:${u.port}/`)).json()).served));
  // The first replica last: it owns the private Redis the others use.
  for (const g of [...gateways].reverse()) g.child.kill('SIGTERM');
  for (const u of upstreams) u.child.kill('SIGTERM');
  const mean = REQUESTS / UPSTREAMS;
  return {
    policy, N: gatewayCount, K: capacity,
    'cached share': +(cached / prompt).toFixed(3),
    'ideal share': +idealShare(requests).toFixed(3),
    'requests per upstream': served.join(' '),
    'max ÷ mean': +(Math.max(...served) / mean).toFixed(2),
    'wall s': +wall.toFixed(1),
  };
}

try {
  const rows = [];
  let index = 0;
  for (const capacity of [2, 4]) {
    for (const gatewayCount of [1, 3]) {
      for (const policy of POLICIES) rows.push(await run(index++, policy, gatewayCount, capacity));
    }
  }
  console.log(`${UPSTREAMS} upstreams whose caches hold their K latest prompts, ${TENANTS} tenants with ${SYSTEM_WORDS}-word system prompts, ${REQUESTS} requests in a seeded random tenant order, ${IN_FLIGHT} in flight, N Parley replicas on one Redis`);
  console.table(rows);
} finally {
  stopAll();
}
