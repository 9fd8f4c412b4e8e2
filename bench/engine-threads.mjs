// How fast `parley engine` writes a reply for each number of CPU threads:
// one, one per core, node-llama-cpp's own default (two per core on a machine
// without a GPU), and the engine's default. Parley's own model always, and
// any GGUF given (../shared/tools/make_model.py makes models of real sizes).
// One request at a time, 40 reply tokens after a short prompt; the median
// of three, or one alone when it took over 10 s.
//
//   npm run build && node bench/engine-threads.mjs [model.gguf ...]
import { mkdtempSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { localLlama } from '../dist/engine/llama.js';
import { DEFAULT_MODEL_FILE, ensureDefaultModel } from '../dist/engine/model-maker.js';
import { freePort, median, startEngine, stopAll } from './support.mjs';

const REPLY_TOKENS = 40;
const ROUNDS = 3;
const dataDir = mkdtempSync(join(tmpdir(), 'parley-bench-threads-'));
const models = [ensureDefaultModel(join(dataDir, 'models', DEFAULT_MODEL_FILE)), ...process.argv.slice(2)];
const llama = await localLlama();
const settings = [
  ['1', 1],
  [`one per core (${llama.cpuMathCores})`, llama.cpuMathCores],
  [`node-llama-cpp's default (${llama.maxThreads || llama.cpuMathCores})`, llama.maxThreads || llama.cpuMathCores],
  ["the engine's default", null],
];

/** Milliseconds for one reply of REPLY_TOKENS (seeded; a reply that ends sooner is scaled up). */
async function replyMs(url, seed, maxTokens = REPLY_TOKENS) {
  const started = performance.now();
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }], max_tokens: maxTokens, seed }),
  });
  const { usage } = await res.json();
  return ((performance.now() - started) * maxTokens) / Math.max(1, usage.completion_tokens);
}

const rows = [];
try {
  for (const model of models) {
    for (const [name, threads] of settings) {
      const port = freePort();
      const e = await startEngine(port, { parallel: 1, dataDir, model, threads });
      const url = `http://127.0.0.1:${port}/v1`;
      await replyMs(url, 0, 2);
      const times = [];
      for (let seed = 1; seed <= ROUNDS && !(times[0] > 10_000); seed++) times.push(await replyMs(url, seed));
      rows.push({ model: basename(model), threads: threads === null ? `${name} (${e.threads})` : name, [`ms per ${REPLY_TOKENS}-token reply`]: Math.round(median(times)) });
      e.child.kill('SIGTERM');
      await new Promise((resolve) => e.child.once('exit', resolve));
    }
  }
} finally {
  stopAll();
}
console.log(`${cpus().length} CPUs`);
console.table(rows);
