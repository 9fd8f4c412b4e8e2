// A scripted engine that schedules as vLLM does, for what cannot run on
// these machines: MAX_SEQS sequences at once, a first-come waiting queue, a
// KV cache of KV_BLOCKS blocks of 16 tokens (blocks of one prefix shared by
// the sequences running on it, freed blocks kept as a prefix cache until
// room is needed, least recently used first), prefill of the uncached
// tokens one request after another at PREFILL_MS_PER_TOKEN, then a token
// per STEP_MS for every running sequence, and preemption (recompute: the
// newest sequence gives back its blocks and waits at the head of the queue)
// when a running sequence needs a block and none is free. Tokens are the
// prompt's words (block-cache-upstream.mjs's promptTokens).
//
// GET /metrics serves vLLM's gauges as vllm/v1/metrics/loggers.py names
// them (vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc, each with engine and model_name labels, the
// vllm:num_preemptions_total counter, and the vllm:request_inference_time_seconds
// histogram: from a request's first admission to its last token); GET /sim the preemptions, requests
// served and the KV use sampled every 100 ms. Streamed chat replies carry
// usage with cached_tokens, as do whole ones (a batch's lines); the text
// says the engine's port.
//
//   node bench/vllm-sim-engine.mjs PORT [MAX_SEQS 8] [KV_BLOCKS 2048] [PREFILL_MS_PER_TOKEN 0.05] [STEP_MS 20]
import { createServer } from 'node:http';
import { BLOCK_TOKENS, blockKeys, promptTokens } from './block-cache-upstream.mjs';

const [PORT, MAX_SEQS, KV_BLOCKS, PREFILL_MS_PER_TOKEN, STEP_MS] = [0, 8, 2048, 0.05, 20].map((d, i) => Number(process.argv[2 + i] ?? d));

/** Full prompt blocks in use, with how many running sequences hold each. */
const inUse = new Map();
/** Freed blocks kept for their prefix, least recently used first. */
const cached = new Map();
let privateBlocks = 0;
const running = [];
const waiting = [];
let prefillFreeAt = 0;
let preemptions = 0;
let served = 0;
/** Requests finished and the seconds they ran in all (vllm:request_inference_time_seconds). */
const ran = { requests: 0, seconds: 0 };
const kvSamples = [];

const used = () => inUse.size + privateBlocks;
const free = () => KV_BLOCKS - used();

function makeRoom(blocks) {
  while (free() - cached.size < blocks && cached.size > 0) cached.delete(cached.keys().next().value);
  return free() - cached.size >= blocks;
}

/** Blocks a sequence needs for its prompt beyond those it shares, and its prompt's cached tokens. */
function lookup(seq) {
  let hits = 0;
  while (hits < seq.keys.length && (inUse.has(seq.keys[hits]) || cached.has(seq.keys[hits]))) hits++;
  return { hits, needed: seq.keys.length - hits + 1 };
}

function admit(now) {
  while (running.length < MAX_SEQS && waiting.length > 0) {
    const seq = waiting[0];
    const { hits, needed } = lookup(seq);
    if (!makeRoom(needed)) return;
    waiting.shift();
    for (const key of seq.keys) {
      cached.delete(key);
      inUse.set(key, (inUse.get(key) ?? 0) + 1);
    }
    seq.private = 1 + Math.ceil(seq.generated / BLOCK_TOKENS);
    privateBlocks += seq.private;
    const cachedTokens = Math.min(hits * BLOCK_TOKENS, seq.prompt.length - 1);
    // The first admission reports its prompt's cache hits; a preempted sequence recomputes what it had generated too.
    if (seq.cachedTokens === undefined) seq.cachedTokens = cachedTokens;
    const uncached = seq.prompt.length - cachedTokens + seq.generated;
    prefillFreeAt = Math.max(prefillFreeAt, now) + uncached * PREFILL_MS_PER_TOKEN;
    seq.readyAt = prefillFreeAt;
    seq.admittedAt ??= now;
    running.push(seq);
  }
}

function release(seq) {
  for (const key of seq.keys) {
    const refs = inUse.get(key) - 1;
    if (refs > 0) inUse.set(key, refs);
    else {
      inUse.delete(key);
      cached.set(key, true);
    }
  }
  privateBlocks -= seq.private;
  running.splice(running.indexOf(seq), 1);
}

function step() {
  const now = performance.now();
  admit(now);
  for (const seq of [...running]) {
    if (!running.includes(seq) || seq.readyAt > now) continue;
    if (seq.generated > 0 && seq.generated % BLOCK_TOKENS === 0) {
      // A new block for the reply: preempt the newest others until one is free.
      while (!makeRoom(1)) {
        const victim = running.filter((s) => s !== seq).at(-1);
        if (!victim) break;
        release(victim);
        waiting.unshift(victim);
        preemptions++;
      }
      if (!makeRoom(1)) continue;
      seq.private++;
      privateBlocks++;
    }
    seq.generated++;
    seq.emit(seq.generated === seq.maxTokens);
    if (seq.generated === seq.maxTokens || seq.gone) {
      release(seq);
      served++;
      if (seq.gone) continue;
      ran.requests++;
      ran.seconds += (now - seq.admittedAt) / 1000;
    }
  }
}
setInterval(step, STEP_MS);
setInterval(() => {
  kvSamples.push(+(used() / KV_BLOCKS).toFixed(3));
  if (kvSamples.length > 6000) kvSamples.shift();
}, 100);

const chunk = (delta, finish = null, extra = {}) =>
  `data: ${JSON.stringify({ id: 'sim', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra })}\n\n`;

const metrics = () => {
  const l = '{engine="0",model_name="m"}';
  return [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.', '# TYPE vllm:num_requests_running gauge', `vllm:num_requests_running${l} ${running.length}.0`,
    '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.', '# TYPE vllm:num_requests_waiting gauge', `vllm:num_requests_waiting${l} ${waiting.length}.0`,
    '# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.', '# TYPE vllm:kv_cache_usage_perc gauge', `vllm:kv_cache_usage_perc${l} ${used() / KV_BLOCKS}`,
    '# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.', '# TYPE vllm:num_preemptions_total counter', `vllm:num_preemptions_total${l} ${preemptions}.0`,
    '# HELP vllm:request_inference_time_seconds Histogram of time spent in RUNNING phase for request.', '# TYPE vllm:request_inference_time_seconds histogram',
    `vllm:request_inference_time_seconds_sum${l} ${ran.seconds}`, `vllm:request_inference_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} ${ran.requests}.0`, `vllm:request_inference_time_seconds_count${l} ${ran.requests}.0`,
    '',
  ].join('\n');
};

const server = createServer((req, res) => {
  if (req.method === 'GET') {
    if (req.url === '/metrics') return res.end(metrics());
    if (req.url === '/sim') return res.end(JSON.stringify({ preemptions, served, kv: kvSamples }));
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end('{"object":"list","data":[]}');
  }
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    const request = JSON.parse(body);
    const prompt = promptTokens(request.messages);
    const port = server.address().port;
    const streamed = request.stream === true;
    if (streamed) res.writeHead(200, { 'content-type': 'text/event-stream' });
    const seq = {
      prompt, keys: blockKeys(prompt), generated: 0, maxTokens: Math.max(1, request.max_tokens ?? 16), gone: false,
      emit(last) {
        if (seq.gone) return;
        if (streamed) res.write(chunk(seq.generated === 1 ? { role: 'assistant', content: `${port} ` } : { content: 'tok ' }));
        if (!last) return;
        const usage = { prompt_tokens: prompt.length, completion_tokens: seq.generated, total_tokens: prompt.length + seq.generated, prompt_tokens_details: { cached_tokens: seq.cachedTokens } };
        // A whole reply (a batch's line) comes at once, when the sequence ends.
        if (!streamed) {
          const content = `${port} ${'tok '.repeat(seq.generated - 1)}`;
          res.writeHead(200, { 'content-type': 'application/json' });
          return res.end(JSON.stringify({ id: 'sim', object: 'chat.completion', created: 1, model: 'sim', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'length' }], usage }));
        }
        res.write(chunk({}, 'length'));
        res.write(chunk(undefined, null, { choices: [], usage }));
        res.end('data: [DONE]\n\n');
      },
    };
    res.on('close', () => {
      if (res.writableEnded) return;
      seq.gone = true;
      const queued = waiting.indexOf(seq);
      if (queued >= 0) waiting.splice(queued, 1);
      else if (running.includes(seq)) release(seq);
    });
    waiting.push(seq);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(PORT, '127.0.0.1', () => process.send?.({ port: server.address().port }));
