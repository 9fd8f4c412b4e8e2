// How fast `parley engine` writes a reply for each number of CPU threads:
// one, one per core, node-llama-cpp's own default (two per core on a machine
// without a GPU), and the engine's default. Parley's own model always, and
// any GGUF given (../shared/tools/make_model.py makes models of real sizes).
// One request at a time, 40 reply tokens after a short prompt; the median
// of three, or one alone when it took over 10 s.
//
//   npm run build && node bench/engine-threads.mjs [model.gguf ...]
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { localLlama } from '../dist/engine/llama.js';
import { DEFAULT_MODEL_FILE, ensureDefaultModel } from '../dist/engine/model-maker.js';
import { freePort, median, ROOT, stopAll, track, waitForPort } from './support.mjs';

const REPLY_TOKENS = 40;
const ROUNDS = 3;
const dataDir = mkdtempSync(join(tmpdir(), 'parley-bench-threads-'));
const models = [ensureDefaultModel(join(dataDir, 'models', DEFAULT_MODEL_FILE)), ...process.argv.slice(2)];
const llama = await localLlama();
const settings = [
  ['1', 1],
  [`one per core (${llama.cpuMathCores})`, llama.cpuMathCores],
  [`node-llama-cpp's default (${llama.maxThreads || llama.cpuMathCores})`, llama.maxThreads || llama.cpuMathCores],
  ["the engine's default", undefined],
];

/** A `parley engine` on `model` with `threads` (its own default when undefined). */
async function engine(model, threads) {
  const port = freePort();
  const args = ['engine', '--model', model, '--port', String(port), '--parallel', '1', '--data-dir', dataDir, ...(threads ? ['--threads', String(threads)] : [])];
  const child = track(spawn(process.execPath, [join(ROOT, 'bin/parley.js'), ...args], { stdio: ['ignore', 'pipe', 'inherit'] }));
  let printed = '';
  child.stdout.on('data', (d) => (printed += d));
  await waitForPort(`http://127.0.0.1:${port}/health`);
  return { url: `http://127.0.0.1:${port}/v1`, child, printed: () => printed };
}

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
      const e = await engine(model, threads);
      await replyMs(e.url, 0, 2);
      const times = [];
      for (let seed = 1; seed <= ROUNDS && !(times[0] > 10_000); seed++) times.push(await replyMs(e.url, seed));
      const used = /(\d+) threads?\)/.exec(e.printed())?.[1];
      rows.push({ model: basename(model), threads: threads ? name : `${name} (${used})`, [`ms per ${REPLY_TOKENS}-token reply`]: Math.round(median(times)) });
      e.child.kill('SIGTERM');
      await new Promise((resolve) => e.child.once('exit', resolve));
    }
  }
} finally {
  stopAll();
}
console.log(`${cpus().length} CPUs`);
console.table(rows);
