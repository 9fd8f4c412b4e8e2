// What sharing a model's affinity keys costs a replica that serves nothing:
// its main thread's CPU a second and how late its event loop ran (the wait
// of a request arriving then), with one key known and then with many (as
// many tenants and agent sessions make), this build and a revision in one
// run. The keys are written straight into the fleet's sorted sets in Redis,
// as other replicas' exchanges would have; each replica then takes them at
// its next exchange, every SHARE_INTERVAL_MS (routing/prefix-sharing.ts).
// Then a tenant that names a new cache key at every request (a fresh
// `prompt_cache_key`, one request at a time): each such request waits for
// its key to join the fleet's order; the main thread's CPU per request.
//
//   npm run build && node bench/prefix-sharing-cost.mjs [revision, none] [keys, 4096] [seconds, 10] [requests with new keys, 300]
import { execFileSync } from 'node:child_process';
import { benchModel, buildOf, countHook, forked, hookCounts, mainThreadCpuMicros, ROOT, startParley, stopAll } from './support.mjs';
import { setTimeout as sleep } from 'node:timers/promises';

const REVISION = process.argv[2] ?? 'none';
const KEYS = Number(process.argv[3] ?? 4096);
const SECONDS = Number(process.argv[4] ?? 10);
const CHURN = Number(process.argv[5] ?? 300);

/** Main-thread CPU (ms a second) and the event loop's delay over SECONDS of idling. */
async function idle(parley) {
  await sleep(2000);
  await hookCounts(parley.child);
  const before = mainThreadCpuMicros(parley.child.pid);
  await sleep(SECONDS * 1000);
  const { loopDelayMs } = await hookCounts(parley.child);
  return { cpu: ((mainThreadCpuMicros(parley.child.pid) - before) / SECONDS / 1000).toFixed(1), delay: `${loopDelayMs.p99} / ${loopDelayMs.max}` };
}

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0', '0']);
  const builds = [['this build', ROOT]];
  if (REVISION !== 'none') builds.push([REVISION, buildOf(REVISION)]);
  const rows = [];
  for (const [name, root] of builds) {
    const parley = await startParley([benchModel(`http://127.0.0.1:${port}`)], {}, countHook(), undefined, root);
    const ask = (extra = {}) =>
      fetch(`${parley.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${parley.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'hi' }], ...extra }),
      }).then((r) => r.text());
    // One request, so that the model's key is known and shared.
    await ask();
    const one = await idle(parley);
    const socket = execFileSync('sh', ['-c', `find ${parley.dataDir} -name '*.sock' | head -1`]).toString().trim();
    const now = Date.now() * 1000;
    let commands = '';
    for (let i = 0; i < KEYS; i++) {
      const key = `k:${String(i).padStart(22, '0')}`;
      commands += `ZADD parley:{affinity-keys:bench}:first-seen ${now + i} ${key}\nZADD parley:{affinity-keys:bench}:last-seen ${now} ${key}\n`;
    }
    execFileSync('redis-cli', ['-s', socket], { input: commands, stdio: ['pipe', 'ignore', 'inherit'] });
    const many = await idle(parley);
    const before = mainThreadCpuMicros(parley.child.pid);
    for (let i = 0; i < CHURN; i++) await ask({ prompt_cache_key: `churn-${name}-${i}` });
    const churn = Math.round((mainThreadCpuMicros(parley.child.pid) - before) / CHURN);
    rows.push({
      build: name, 'CPU ms/s, 1 key': one.cpu, 'loop delay p99 / max ms, 1 key': one.delay, [`CPU ms/s, ${KEYS} keys`]: many.cpu,
      [`loop delay p99 / max ms, ${KEYS} keys`]: many.delay, 'µs a request with a new key': churn,
    });
    parley.child.kill('SIGTERM');
  }
  console.table(rows);
} finally {
  stopAll();
}
