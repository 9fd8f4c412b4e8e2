// What the benchmark scripts share: child processes that die with the
// script, waiting for a port, a `parley serve` on its own data folder with a
// demo key that has credit and rate limits enough for a benchmark, and the
// load the gateway benchmarks drive.
import { execFileSync, fork, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
const children = new Set();

export function track(child) {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export function stopAll() {
  for (const c of children) c.kill('SIGTERM');
}
process.once('exit', stopAll);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    stopAll();
    process.exit(130);
  });
}

export async function waitForPort(url, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      await fetch(url);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`nothing answers at ${url}`);
}

/**
 * Forks one of the bench's servers (`script` relative to the root), with
 * `execArgv` Node flags (its stdout is then piped, for what they print);
 * resolves to the port it reports, its pid and the child.
 */
export function forked(script, args, execArgv = []) {
  return new Promise((resolve, reject) => {
    const child = track(fork(join(ROOT, script), args, { execArgv, stdio: ['ignore', execArgv.length ? 'pipe' : 'ignore', 'inherit', 'ipc'] }));
    child.once('message', (m) => resolve({ port: m.port, pid: child.pid, child }));
    child.once('exit', (code) => reject(new Error(`${script} exited ${code}`)));
  });
}

/** The routing entry of the model the gateway benchmarks ask for, served by the fast upstream at `upstream`. */
export const benchModel = (upstream) => ({
  id: 'bench', contextWindow: 32768, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, api: ['chat', 'embeddings'],
  endpoints: [{ kind: 'vllm', url: `${upstream}/v1`, maxConcurrent: 64, maxQueue: 64 }],
});

/**
 * benchModel as any revision reads it: revisions before embeddings knew no `api`, so a chat load leaves it out
 * (an embeddings load keeps it, and needs a revision that has embeddings).
 */
export function revisionModel(upstream, mode = 'whole') {
  const { api, ...chat } = benchModel(upstream);
  return mode === 'embeddings' ? { ...chat, api } : chat;
}

/** What each benchmark mode posts, and where under /v1: a chat completion of 256 tokens, whole or streamed (as chat, Anthropic's Messages or OpenAI's Responses), or 16 texts to embed. */
export const LOADS = {
  whole: { path: '/chat/completions', body: { model: 'bench', messages: [{ role: 'system', content: 'You are a benchmark.' }, { role: 'user', content: 'Say 256 tokens.' }], max_tokens: 256, stream: false } },
  streamed: { path: '/chat/completions', body: { model: 'bench', messages: [{ role: 'system', content: 'You are a benchmark.' }, { role: 'user', content: 'Say 256 tokens.' }], max_tokens: 256, stream: true } },
  'messages whole': { path: '/messages', body: { model: 'bench', system: 'You are a benchmark.', messages: [{ role: 'user', content: 'Say 256 tokens.' }], max_tokens: 256, stream: false } },
  'messages streamed': { path: '/messages', body: { model: 'bench', system: 'You are a benchmark.', messages: [{ role: 'user', content: 'Say 256 tokens.' }], max_tokens: 256, stream: true } },
  'responses whole': { path: '/responses', body: { model: 'bench', instructions: 'You are a benchmark.', input: 'Say 256 tokens.', max_output_tokens: 256, stream: false } },
  'responses streamed': { path: '/responses', body: { model: 'bench', instructions: 'You are a benchmark.', input: 'Say 256 tokens.', max_output_tokens: 256, stream: true } },
  embeddings: { path: '/embeddings', body: { model: 'bench', input: Array.from({ length: 16 }, (_, i) => `Passage ${i} of a document to index for retrieval.`), encoding_format: 'base64' } },
};

/** autocannon posting `mode`'s request to `base` (a server's /v1) for `duration` seconds. */
export function apiLoad(base, headers, mode, connections, duration) {
  const { path, body } = LOADS[mode];
  return new Promise((resolve, reject) => {
    autocannon({ url: base + path, method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), connections, duration }, (err, r) => (err ? reject(err) : resolve(r)));
  });
}

/**
 * Seconds of load each gateway serves, unmeasured, before it is measured: a
 * gateway runs for days, so what counts is its speed once V8 has compiled its
 * hot code. From a cold start, in 5-second windows of the streamed load,
 * Parley went 825 → 1,439 → 1,852 → 2,138 req/s while its V8 helper threads
 * spent 426 → 74 → 54 → 24 µs per request compiling; whole, 2,170 → 2,562 →
 * 3,020 → 3,380 → 3,678 req/s. The bare proxy, far less code, settled within
 * about 10 s.
 */
export const WARMUP_SECONDS = 20;

/**
 * The warm-up is served in this many parts, the gateways taking turns. Warmed
 * one after the other (20 s each), the gateway warmed first served 32
 * connections of embeddings 1.4 to 1.6 times as fast as the second for the
 * whole run, whichever build each ran: the build against its own commit,
 * `node bench/revision-ab.mjs <this commit> embeddings 32 6 4`, gave 1.61
 * that way and 0.98 in turns (2026-11-26). The cause is not known: neither a
 * shared upstream nor Redis's AOF rewrites.
 */
const WARMUP_PARTS = 4;

/** The middle value of a list of numbers (0 for none). */
export const median = (xs) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] : 0);

/** The Node flags on a bin's first line (`#!/usr/bin/env -S node FLAGS`). */
const binNodeFlags = (bin) => readFileSync(bin, 'utf8').split('\n', 1)[0].split(/\s+/).filter((w) => w.startsWith('--'));

export const freePort = () => 20000 + Math.floor(Math.random() * 20000);

/**
 * `parley serve` on a routing file made of `models` (and `gateway` settings;
 * `nodeArgs` such as --cpu-prof); resolves to its URL and demo key. Given
 * `replicaOf` (what an earlier call resolved to), it starts another replica
 * on the same data folder, and so the same private Redis and demo key.
 * `root` is the checkout whose build runs (another revision's, for an A/B).
 */
export async function startParley(models, gateway = {}, nodeArgs = [], replicaOf = undefined, root = ROOT) {
  const dir = replicaOf?.dataDir ?? mkdtempSync(join(tmpdir(), 'parley-bench-'));
  const config = join(dir, 'routing.json');
  writeFileSync(config, JSON.stringify({
    gateway,
    billing: { demoCredit: 1_000_000 },
    rateLimits: { requestsPerMinute: 100_000_000, tokensPerMinute: 2_000_000_000 },
    models,
  }));
  const port = freePort();
  const bin = join(root, 'bin/parley.js');
  const args = ['serve', '--config', config, '--port', String(port), '--host', '127.0.0.1', '--data-dir', dir];
  // The bin as an executable, as Parley is run (its first line holds its Node flags), on this Node. Extra
  // Node flags (some, such as --cpu-prof, are refused in NODE_OPTIONS) go on a command line of the bin's own.
  const env = { ...process.env, REDIS_URL: '', PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` };
  const options = { stdio: ['ignore', 'pipe', 'inherit'], env };
  const child = track(nodeArgs.length ? spawn(process.execPath, [...binNodeFlags(bin), ...nodeArgs, bin, ...args], options) : spawn(bin, args, options));
  let output = '';
  const url = `http://127.0.0.1:${port}`;
  if (replicaOf) {
    // The demo key is printed on the first start only; its log lines are read and dropped.
    child.stdout.resume();
    await waitForPort(`${url}/healthz`);
    return { url, key: replicaOf.key, child, dataDir: dir };
  }
  const key = await new Promise((resolve, reject) => {
    const read = (d) => {
      output += d;
      const m = /(sk-parley-\S+)/.exec(output);
      if (!m) return;
      // From here on its output (a log line per request) is read and dropped.
      child.stdout.off('data', read);
      child.stdout.resume();
      resolve(m[1]);
    };
    child.stdout.on('data', read);
    child.once('exit', (code) => reject(new Error(`parley serve exited ${code}: ${output}`)));
  });
  return { url, key, child, dataDir: dir };
}

/**
 * A `parley engine` on `port`, serving Parley's own model or `model`, with
 * `threads` (null: the engine's own default); resolves, once it is ready,
 * to the child and the threads it reports.
 */
// One thread each unless asked: several engines spinning on every core of a small machine slow each other down.
export function startEngine(port, { parallel = 4, contextSize = 4096, dataDir, threads = 1, model } = {}) {
  const args = ['engine', '--port', String(port), '--parallel', String(parallel), '--context-size', String(contextSize), '--data-dir', dataDir];
  if (threads !== null) args.push('--threads', String(threads));
  if (model) args.push('--model', model);
  return new Promise((resolve, reject) => {
    const child = track(fork(join(ROOT, 'bin/parley.js'), args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] }));
    child.once('message', (m) => resolve({ child, threads: m.threads }));
    child.once('exit', (code) => reject(new Error(`parley engine exited ${code}`)));
  });
}

/**
 * A copy of this build (its bin, dist, config and package.json, on this
 * checkout's node_modules) with `patches` made to its dist: each a file under
 * dist/, a text in it and what replaces that text. Throws where a text is
 * not there, so that a patch the code has outgrown is not measured as one.
 */
export function patchedBuild(label, patches) {
  const root = mkdtempSync(join(tmpdir(), `parley-${label}-`));
  for (const entry of ['bin', 'dist', 'config', 'package.json']) cpSync(join(ROOT, entry), join(root, entry), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(root, 'node_modules'));
  for (const [file, text, replacement] of patches) {
    const path = join(root, 'dist', file);
    const before = readFileSync(path, 'utf8');
    const after = before.replace(text, replacement);
    if (after === before) throw new Error(`${label}: no ${text} in dist/${file}`);
    writeFileSync(path, after);
  }
  return root;
}

/** patchedBuild's patch that takes the fleet's slots out (routing/fleet-slots.ts): each replica goes by its own count. */
export const FLEET_SLOTS_OFF = ['routing/router.js', 'this.slots = redis && new FleetSlots(redis);', 'this.slots = undefined;'];

/** A checkout of `revision` with its build, sharing this one's node_modules. */
export function buildOf(revision) {
  const dir = mkdtempSync(join(tmpdir(), `parley-${revision}-`));
  execFileSync('sh', ['-c', `git -C "${ROOT}" archive "${revision}" | tar -x -C "${dir}"`]);
  if (!existsSync(join(dir, 'node_modules'))) symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], { cwd: dir, stdio: 'inherit' });
  // Earlier revisions built a native addon too.
  if (existsSync(join(dir, 'scripts/build-native.mjs'))) execFileSync(process.execPath, ['scripts/build-native.mjs'], { cwd: dir, stdio: 'inherit' });
  return dir;
}

/**
 * Node flags that load count-hook.mjs into a Parley (startParley's `nodeArgs`), to read with hookCounts; the folder
 * its counts go to is made the first time (the Parley finds it in the environment it inherits).
 */
export function countHook() {
  process.env.COUNT_HOOK_DIR ??= mkdtempSync(join(tmpdir(), 'parley-counts-'));
  return ['--import', join(ROOT, 'bench/count-hook.mjs')];
}

/** What count-hook.mjs in `child` has counted so far. */
export async function hookCounts(child) {
  const file = join(process.env.COUNT_HOOK_DIR, `counts-${child.pid}.json`);
  rmSync(file, { force: true });
  child.kill('SIGUSR2');
  for (;;) {
    await sleep(50);
    try {
      return JSON.parse(readFileSync(file, 'utf8'));
    } catch {
      // not written yet, or not whole yet
    }
  }
}

/** /proc's unit of CPU time (USER_HZ), 100 on every Linux Node runs on. */
const CLOCK_TICKS_PER_SECOND = 100;

/** CPU time (user and system) of a process's main thread so far, in µs, where Linux's /proc tells it (else undefined). */
export function mainThreadCpuMicros(pid) {
  try {
    const fields = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/**
 * `mode` load on each of two gateways in turn (`targets`: [name, parley]
 * pairs), in the reverse order every other round, after a warm-up; prints
 * each round's requests/s and the median of the same-round ratios first ÷
 * second, which it returns. Where /proc tells it, also each gateway's
 * main-thread CPU per request over all its rounds: the event loop's own
 * work, a second view of what a build costs, which does not count the time
 * a request waits on the machine's other processes. Both move on a small
 * shared VM: the build against its own commit measured 0.97 (0.92 to 1.00)
 * and 610 against 582 µs in four 8-second rounds (2026-11-27), so a
 * difference of a few percent needs many rounds.
 */
export async function abRounds(label, targets, { mode, connections, seconds, rounds }) {
  const load = ([, p], s) => apiLoad(`${p.url}/v1`, { authorization: `Bearer ${p.key}` }, mode, connections, s);
  for (let part = 0; part < WARMUP_PARTS; part++) for (const target of targets) await load(target, WARMUP_SECONDS / WARMUP_PARTS);
  const ratios = [];
  const cpu = new Map(targets.map(([name]) => [name, { micros: 0, requests: 0 }]));
  for (let round = 0; round < rounds; round++) {
    const rate = new Map();
    for (const target of round % 2 ? [...targets].reverse() : targets) {
      const before = mainThreadCpuMicros(target[1].child.pid);
      const r = await load(target, seconds);
      const after = mainThreadCpuMicros(target[1].child.pid);
      if (r.non2xx || r.errors) throw new Error(`${target[0]}: ${r.non2xx} non-2xx, ${r.errors} errors`);
      rate.set(target[0], r.requests.average);
      const spent = cpu.get(target[0]);
      spent.micros += after - before;
      spent.requests += r.requests.total;
    }
    const [a, b] = targets.map(([name]) => rate.get(name));
    ratios.push(a / b);
    console.log(`${label}, round ${round + 1}: ${targets[0][0]} ${Math.round(a)} req/s, ${targets[1][0]} ${Math.round(b)} req/s, ratio ${ratios.at(-1).toFixed(2)}`);
  }
  console.log(`${label}: ${targets[0][0]} ÷ ${targets[1][0]}: median ${median(ratios).toFixed(2)} (rounds: ${ratios.map((r) => r.toFixed(2)).join(' ')})`);
  const perRequest = targets.map(([name]) => [name, cpu.get(name).micros / cpu.get(name).requests]);
  if (perRequest.every(([, us]) => Number.isFinite(us))) console.log(`${label}: main-thread CPU per request: ${perRequest.map(([name, us]) => `${name} ${Math.round(us)} µs`).join(', ')}`);
  return median(ratios);
}
