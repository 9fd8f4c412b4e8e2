// Parley's added time to first token in front of a real engine: llama.cpp's
// own llama-server on Parley's tiny model (made here, as the quickstart
// makes it), streamed chat completions of a short prompt, each loop sending
// its next request when its last one ends, at 1 and 16 connections, direct
// and through Parley (a `llamacpp` endpoint), taking turns. Prints time to
// first token (the first event with text) p50/p99 and requests/s of each.
//
// llama-server is built from the llama.cpp source node-llama-cpp ships (its
// git bundle); give its path, or build it once with
//   git clone -q node_modules/node-llama-cpp/llama/gitRelease.bundle /tmp/llama.cpp &&
//   cmake -S /tmp/llama.cpp -B /tmp/llama.cpp/build -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF &&
//   cmake --build /tmp/llama.cpp/build --target llama-server -j 2
//
//   npm run build && node bench/real-upstream-ttft.mjs [llama-server, /tmp/llama.cpp/build/bin/llama-server] [seconds per run, 10] [rounds, 3]
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDefaultModel, DEFAULT_MODEL_FILE } from '../dist/engine/model-maker.js';
import { freePort, median, startParley, stopAll, track, waitForPort } from './support.mjs';

const SERVER = process.argv[2] ?? '/tmp/llama.cpp/build/bin/llama-server';
const SECONDS = Number(process.argv[3] ?? 10);
const ROUNDS = Number(process.argv[4] ?? 3);
const SLOTS = 16;
const BODY = { model: 'tiny', messages: [{ role: 'user', content: 'Say something short.' }], max_tokens: 8, stream: true };

/**
 * One streamed request: ms to its first event with text, or undefined when it failed or wrote none. A connection
 * the server closed as it was reused ("other side closed": llama-server closes some of 16 kept-alive connections)
 * is tried again once, as a client would, timed from the second try.
 */
async function firstToken(url, headers, retried = false) {
  const started = performance.now();
  try {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(BODY) });
    if (res.status !== 200) return void console.warn(`${url}: ${res.status} ${await res.text()}`);
    let first;
    const decoder = new TextDecoder();
    for await (const chunk of res.body) {
      if (first === undefined && /"content":"[^"]/.test(decoder.decode(chunk, { stream: true }))) first = performance.now() - started;
    }
    return first;
  } catch (err) {
    if (!retried && err.cause?.code === 'UND_ERR_SOCKET') return firstToken(url, headers, true);
    console.warn(`${url}: ${err.cause?.message ?? err.message}`);
    return undefined;
  }
}

/** `connections` loops for SECONDS: each request's time to first token, and how many a second. */
async function load(url, headers, connections) {
  const times = [];
  let failed = 0;
  const until = performance.now() + SECONDS * 1000;
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < until) {
      const ms = await firstToken(url, headers);
      if (ms === undefined) failed++;
      else times.push(ms);
    }
  }));
  const sorted = times.sort((a, b) => a - b);
  return { p50: sorted[Math.floor(sorted.length / 2)], p99: sorted[Math.floor(sorted.length * 0.99)], rate: sorted.length / SECONDS, failed };
}

try {
  const dir = mkdtempSync(join(tmpdir(), 'parley-ttft-'));
  const model = ensureDefaultModel(join(dir, DEFAULT_MODEL_FILE));
  const port = freePort();
  // One thread, as the quickstart's engine runs, and a slot per connection, each with the prompt's room.
  track(spawn(SERVER, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-t', '1', '-np', String(SLOTS), '-c', String(SLOTS * 1024)], { stdio: 'ignore' }));
  const upstream = `http://127.0.0.1:${port}`;
  await waitForPort(`${upstream}/health`, 120_000);
  // It answers 503 while it loads the model.
  while ((await fetch(`${upstream}/health`)).status !== 200) await new Promise((r) => setTimeout(r, 200));
  const parley = await startParley([{ id: 'tiny', contextWindow: 1024, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, endpoints: [{ kind: 'llamacpp', url: `${upstream}/v1`, maxConcurrent: SLOTS, maxQueue: 64 }] }]);
  const targets = [['direct', `${upstream}/v1/chat/completions`, {}], ['Parley', `${parley.url}/v1/chat/completions`, { authorization: `Bearer ${parley.key}` }]];
  for (const [, url, headers] of targets) await load(url, headers, SLOTS);
  const rows = [];
  for (const connections of [1, SLOTS]) {
    const runs = new Map(targets.map(([name]) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, url, headers] of round % 2 ? [...targets].reverse() : targets) runs.get(name).push(await load(url, headers, connections));
    }
    for (const [name, list] of runs) {
      const mid = (k) => median(list.map((r) => r[k]));
      rows.push({ connections, target: name, 'requests/s': mid('rate').toFixed(1), 'TTFT p50 ms': mid('p50').toFixed(1), 'TTFT p99 ms': mid('p99').toFixed(1), 'failed or no text': list.reduce((n, r) => n + r.failed, 0) });
    }
  }
  console.table(rows);
} finally {
  stopAll();
}
