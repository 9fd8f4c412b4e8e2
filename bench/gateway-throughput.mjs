// Throughput of Parley's request path against the same fast scripted
// upstream called directly and through a bare http-proxy-3 pass-through
// (and Portkey's gateway when `@portkey-ai/gateway` is installed), whole and
// streamed 256-token replies, autocannon with 32 connections.
//
//   npm run build && node bench/gateway-throughput.mjs [seconds per run, default 10]
import { fork, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { ROOT, startParley, stopAll, track, waitForPort } from './support.mjs';

const SECONDS = Number(process.argv[2] ?? 10);

function forked(script, args) {
  return new Promise((resolve, reject) => {
    const child = track(fork(join(ROOT, script), args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] }));
    child.once('message', (m) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`${script} exited ${code}`)));
  });
}

async function startPortkey() {
  const bin = join(ROOT, 'node_modules/@portkey-ai/gateway/build/start-server.js');
  if (!existsSync(bin)) return undefined;
  const port = 8787;
  track(spawn(process.execPath, [bin, `--port=${port}`], { stdio: ['ignore', 'ignore', 'ignore'] }));
  await waitForPort(`http://127.0.0.1:${port}/`);
  return port;
}

function load(url, headers, stream) {
  const body = JSON.stringify({ model: 'bench', messages: [{ role: 'system', content: 'You are a benchmark.' }, { role: 'user', content: 'Say 256 tokens.' }], max_tokens: 256, stream });
  return new Promise((resolve, reject) => {
    autocannon({ url, method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body, connections: 32, duration: SECONDS }, (err, r) => (err ? reject(err) : resolve(r)));
  });
}

try {
  const upstreamPort = await forked('bench/fast-upstream.mjs', ['0']);
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  const proxyPort = await forked('bench/bare-proxy.mjs', [upstream, '0']);
  const parley = await startParley([
    { id: 'bench', contextWindow: 32768, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, endpoints: [{ kind: 'vllm', url: `${upstream}/v1` }] },
  ]);
  const portkeyPort = await startPortkey();
  const targets = [
    ['direct', `${upstream}/v1/chat/completions`, {}],
    ['bare http-proxy-3', `http://127.0.0.1:${proxyPort}/v1/chat/completions`, {}],
    ['parley', `${parley.url}/v1/chat/completions`, { authorization: `Bearer ${parley.key}` }],
    ...(portkeyPort ? [['portkey', `http://127.0.0.1:${portkeyPort}/v1/chat/completions`, { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${upstream}/v1`, authorization: 'Bearer x' }]] : []),
  ];
  const rows = [];
  for (const stream of [false, true]) {
    for (const [name, url, headers] of targets) {
      const r = await load(url, headers, stream);
      rows.push({ mode: stream ? 'streamed' : 'whole', target: name, 'req/s': Math.round(r.requests.average), 'p50 ms': r.latency.p50, 'p99 ms': r.latency.p99, non2xx: r.non2xx, errors: r.errors });
    }
  }
  console.table(rows);
  for (const mode of ['whole', 'streamed']) {
    const bare = rows.find((r) => r.mode === mode && r.target === 'bare http-proxy-3')['req/s'];
    const parley = rows.find((r) => r.mode === mode && r.target === 'parley')['req/s'];
    console.log(`${mode}: parley / bare pass-through = ${(parley / bare).toFixed(2)}`);
  }
} finally {
  stopAll();
}
