// Prefix affinity against the other policies on real engines: 4 `parley
// engine` replicas of Parley's own model, 8 tenants each with a ~1,300-token
// system prompt, 80 requests round-robin over the tenants, 2 in flight. Per
// policy: the share of prompt tokens the upstreams served from their prefix
// caches, and the wall time.
//
//   npm run build && node bench/prefix-routing.mjs [replicas, default 4] [order: round-robin | shuffled] [gateways, default 1]
//
// `shuffled` sends the tenants in a seeded random order instead of strictly
// in turn: with tenants a multiple of replicas, strict turns make round robin
// place every tenant on one replica by coincidence. With several gateways
// (Parley replicas on one Redis, as on Kubernetes), request i goes to
// gateway i mod gateways, as a load balancer in front of them would spread it.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPromptCounter } from '../dist/engine/chat-prompt.js';
import { DEFAULT_MODEL_FILE, ensureDefaultModel } from '../dist/engine/model-maker.js';
import { freePort, startEngine, startParley, stopAll } from './support.mjs';

const REPLICAS = Number(process.argv[2] ?? 4);
const ORDER = process.argv[3] ?? 'round-robin';
const GATEWAYS = Number(process.argv[4] ?? 1);
const TENANTS = 8;
const REQUESTS = 80;
const IN_FLIGHT = 2;
const SYSTEM_TOKENS = 1300;
const POLICIES = ['round-robin', 'least-load', 'prefix-affinity'];

const WORDS = 'the a gateway token cache stream model reply prompt team cluster request answer system user route price credit key balance engine'.split(' ');

/** A tenant's system prompt of about SYSTEM_TOKENS tokens, different per tenant and per run. */
function systemPrompt(count, run, tenant) {
  let seed = (run * 7919 + tenant * 104729) >>> 0;
  const next = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0);
  let text = `You are the assistant of tenant ${tenant} (run ${run}).`;
  while (count([{ role: 'system', content: text }]) < SYSTEM_TOKENS) {
    for (let i = 0; i < 50; i++) text += ` ${WORDS[next() % WORDS.length]}`;
  }
  return text;
}

async function runPolicy(run, policy, endpoints, count) {
  const models = [{ id: 'tiny', contextWindow: 4096, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, routing: { policy }, endpoints }];
  const settings = { health: { probe: { intervalMs: 0 } } };
  const gateways = [await startParley(models, settings)];
  while (gateways.length < GATEWAYS) gateways.push(await startParley(models, settings, [], gateways[0]));
  const prompts = Array.from({ length: TENANTS }, (_, t) => systemPrompt(count, run, t));
  let seed = 12345;
  const tenantOf = Array.from({ length: REQUESTS }, (_, i) => (ORDER === 'shuffled' ? ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) >>> 16) % TENANTS : i % TENANTS));
  let next = 0;
  let prompt = 0;
  let cached = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < REQUESTS) {
      const i = next++;
      const gateway = gateways[i % GATEWAYS];
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.key}` },
        body: JSON.stringify({ model: 'tiny', max_tokens: 4, messages: [{ role: 'system', content: prompts[tenantOf[i]] }, { role: 'user', content: `question ${i}` }] }),
      });
      const body = await res.json();
      if (!res.ok) throw new Error(`request ${i}: ${res.status} ${JSON.stringify(body)}`);
      prompt += body.usage.prompt_tokens;
      cached += body.usage.prompt_tokens_details.cached_tokens;
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const wall = (performance.now() - started) / 1000;
  // The first replica last: it owns the private Redis the others use.
  for (const g of gateways.reverse()) g.child.kill('SIGTERM');
  return { policy, 'cached share': +(cached / prompt).toFixed(3), 'wall s': +wall.toFixed(1), 'prompt tokens': prompt, 'cached tokens': cached };
}

try {
  const dataDir = mkdtempSync(join(tmpdir(), 'parley-prefix-bench-'));
  const modelPath = ensureDefaultModel(join(dataDir, 'models', DEFAULT_MODEL_FILE));
  const count = await loadPromptCounter(modelPath);
  const rows = [];
  for (const [run, policy] of POLICIES.entries()) {
    // Fresh replicas per policy, so no policy inherits another's caches.
    const ports = Array.from({ length: REPLICAS }, freePort);
    const engines = await Promise.all(ports.map((p) => startEngine(p, { parallel: 4, contextSize: 2048, dataDir })));
    const endpoints = ports.map((p) => ({ kind: 'parley-engine', url: `http://127.0.0.1:${p}/v1` }));
    rows.push(await runPolicy(run, policy, endpoints, count));
    for (const e of engines) e.child.kill('SIGKILL');
  }
  console.log(`${GATEWAYS} gateway${GATEWAYS > 1 ? 's' : ''}, ${REPLICAS} replicas, ${TENANTS} tenants with ~${SYSTEM_TOKENS}-token system prompts, ${REQUESTS} requests in ${ORDER} tenant order, ${IN_FLIGHT} in flight`);
  console.table(rows);
} finally {
  stopAll();
}
