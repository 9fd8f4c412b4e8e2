// A batch job through OpenAI's Batch API on Parley: LINES lines (default
// 1,000) on two simulated vLLM engines (vllm-sim-engine.mjs: 8 sequences at
// once, a KV cache of 1,024 blocks with a prefix cache, prefill by uncached
// tokens, 20 ms a token) behind REPLICAS Parley replicas (default 3) on one
// Redis. The lines share PROMPTS long system prompts (default 40, of 1,200
// words each: more than the engines' caches hold at once), the input
// interleaving them (line i has prompt i mod PROMPTS), each line with its
// own 20-word question and a 32-token reply.
//
// Reports, for this build and for the same build running lines in input
// order (its cache-aware order patched out, same run): the batch's time from
// create to completed, its cached share (cached over prompt tokens, as its
// usage says), and Redis's memory per line (used_memory sampled every 200 ms:
// at its peak while the batch runs, and once it has ended, over the memory
// before the upload). Then interactive time to first token (streamed chats
// of 50 words, one after another): alone, and beside a running batch. Goal:
// p99 beside within 1.5x alone + 50 ms.
//
//   npm run build && node bench/batch-jobs.mjs [LINES 1000] [REPLICAS 3] [PROMPTS 40]
import { join } from 'node:path';
import Redis from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { forked, patchedBuild, ROOT, startParley, stopAll } from './support.mjs';
import { setTimeout as sleep } from 'node:timers/promises';

const LINES = Number(process.argv[2] ?? 1000);
const REPLICAS = Number(process.argv[3] ?? 3);
const PROMPTS = Number(process.argv[4] ?? 40);
const WORDS = 'the a gateway token cache stream model reply prompt team cluster request answer system user route price credit key balance engine'.split(' ');

function words(seed, count) {
  let s = seed;
  const out = [];
  while (out.length < count) out.push(WORDS[(s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % WORDS.length]);
  return out.join(' ');
}

const percentile = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];

const SYSTEMS = Array.from({ length: PROMPTS }, (_, i) => `system prompt ${i}: ${words(1000 + i, 1200)}`);
const inputFile = () =>
  Array.from({ length: LINES }, (_, i) =>
    JSON.stringify({
      custom_id: `line-${i}`, method: 'POST', url: '/v1/chat/completions',
      body: { model: 'm', max_tokens: 32, messages: [{ role: 'system', content: SYSTEMS[i % PROMPTS] }, { role: 'user', content: `question ${i}: ${words(i, 20)}` }] },
    }),
  ).join('\n');

/** Time to the first text of a streamed chat (ms). */
async function firstToken(url, key, i) {
  const started = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'm', stream: true, max_tokens: 16, messages: [{ role: 'user', content: `interactive ${i}: ${words(50_000 + i, 50)}` }] }),
  });
  let ttft;
  for await (const piece of res.body) if (ttft === undefined && Buffer.from(piece).toString().includes('"content"')) ttft = performance.now() - started;
  return ttft;
}

async function firstTokens(url, key, count, offset) {
  const times = [];
  for (let i = 0; i < count; i++) {
    times.push(await firstToken(url, key, offset + i));
    await sleep(50);
  }
  return times;
}

async function run(label, root) {
  const engines = [await forked('bench/vllm-sim-engine.mjs', ['0', '8', '1024', '0.05', '20']), await forked('bench/vllm-sim-engine.mjs', ['0', '8', '1024', '0.05', '20'])];
  const models = [{ id: 'm', contextWindow: 32768, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, endpoints: engines.map((e) => ({ kind: 'vllm', url: `http://127.0.0.1:${e.port}/v1`, maxConcurrent: 8, maxQueue: 512 })) }];
  const settings = { requestLog: false, failover: { flexQueueTimeoutMs: 600_000 } };
  const gateways = [await startParley(models, settings, [], undefined, root)];
  while (gateways.length < REPLICAS) gateways.push(await startParley(models, settings, [], gateways[0], root));
  const { url, key } = gateways[0];
  const redis = new Redis({ path: join(gateways[0].dataDir, 'redis', 'redis.sock') });
  const memory = async () => Number(/used_memory:(\d+)/.exec(await redis.info('memory'))[1]);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
  try {
    const alone = await firstTokens(url, key, 30, 0);
    const before = await memory();
    const file = await client.files.create({ file: await toFile(Buffer.from(inputFile()), 'lines.jsonl'), purpose: 'batch' });
    const started = performance.now();
    let batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    let peak = await memory();
    const sampling = setInterval(() => memory().then((m) => (peak = Math.max(peak, m))), 200);
    await sleep(2_000);
    const beside = await firstTokens(url, key, 30, 1000);
    const besideWhile = (await client.batches.retrieve(batch.id)).status;
    while (!['completed', 'failed', 'expired', 'cancelled'].includes(batch.status)) {
      await sleep(250);
      batch = await client.batches.retrieve(batch.id);
    }
    const seconds = (performance.now() - started) / 1000;
    clearInterval(sampling);
    const after = await memory();
    const { input_tokens: prompt, input_tokens_details: { cached_tokens: cached } } = batch.usage;
    console.log(`\n${label}: ${LINES} lines, ${REPLICAS} replicas: ${batch.status} (${batch.request_counts.completed} done, ${batch.request_counts.failed} failed) in ${seconds.toFixed(1)} s, ${(LINES / seconds).toFixed(0)} lines/s`);
    console.log(`  cached share ${(cached / prompt).toFixed(3)} (${cached} of ${prompt} prompt tokens)`);
    console.log(`  Redis per line: ${((peak - before) / LINES).toFixed(0)} B at the peak, ${((after - before) / LINES).toFixed(0)} B once ended (input line ${(file.bytes / LINES).toFixed(0)} B)`);
    const fmt = (xs) => `p50 ${percentile(xs, 0.5).toFixed(0)} ms, p99 ${percentile(xs, 0.99).toFixed(0)} ms`;
    console.log(`  interactive first token: alone ${fmt(alone)}; beside the batch (${besideWhile}) ${fmt(beside)}; goal p99 <= ${(1.5 * percentile(alone, 0.99) + 50).toFixed(0)} ms`);
  } finally {
    redis.disconnect();
    for (const g of gateways) g.child.kill('SIGTERM');
    for (const e of engines) e.child.kill('SIGTERM');
    await sleep(1_000);
  }
}

try {
  await run('this build (cache-aware order)', ROOT);
  const inputOrder = patchedBuild('input-order', [['batches/input-reading.js', 'order: cacheAwareOrder(lines)', 'order: lines.map((_, i) => i)']]);
  await run('the same, lines in input order', inputOrder);
} finally {
  stopAll();
}
