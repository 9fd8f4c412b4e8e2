// A replica dies under steady load and comes back. 3 `parley engine`
// replicas behind Parley, 4 streamed requests always in flight; at 5 s one
// replica is killed with SIGKILL, at 12 s it is started again on its port;
// the run ends at 20 s. Reports: requests that failed before their stream
// started (goal 0), replies broken mid-stream on the dying replica (they end
// with the error event and cost nothing), how long until the dead replica
// stopped getting traffic, and how long after its return it got traffic again.
//
//   npm run build && node bench/failover.mjs
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startEngine, startParley, stopAll } from './support.mjs';

// The admin API, which the sampler reads, is on only with a token (the gateway takes it from this environment).
process.env.PARLEY_ADMIN_TOKEN ??= `bench-${Math.random().toString(36).slice(2)}`;
const asAdmin = { authorization: `Bearer ${process.env.PARLEY_ADMIN_TOKEN}` };

const IN_FLIGHT = 4;
const KILL_AT = 5_000;
const RETURN_AT = 12_000;
const END_AT = 20_000;

try {
  const dataDir = mkdtempSync(join(tmpdir(), 'parley-failover-bench-'));
  const ports = [freePort(), freePort(), freePort()];
  const engines = await Promise.all(ports.map((p) => startEngine(p, { parallel: 4, contextSize: 1024, dataDir })));
  const endpoints = ports.map((p) => ({ kind: 'parley-engine', url: `http://127.0.0.1:${p}/v1` }));
  const gateway = await startParley(
    [{ id: 'tiny', contextWindow: 1024, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, routing: { policy: 'least-load' }, endpoints }],
    { health: { failureThreshold: 3, openMs: 2_000, probe: { intervalMs: 500, timeoutMs: 500 } } },
  );
  const victim = endpoints[0].url;
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  const counts = { served: 0, failedBeforeStream: 0, brokeMidStream: 0 };
  const failures = [];

  const worker = async (w) => {
    for (let i = 0; now() < END_AT; i++) {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.key}` },
        body: JSON.stringify({ model: 'tiny', stream: true, max_tokens: 24, messages: [{ role: 'user', content: `worker ${w} request ${i}` }] }),
      }).catch((err) => ({ ok: false, status: 0, text: async () => String(err) }));
      if (!res.ok) {
        counts.failedBeforeStream++;
        failures.push(`${res.status} ${(await res.text()).slice(0, 200)}`);
        continue;
      }
      const text = await res.text();
      if (text.includes('data: [DONE]')) counts.served++;
      else counts.brokeMidStream++;
    }
  };

  // The victim's successful requests over time, from the operators' view.
  const samples = [];
  const sampler = setInterval(async () => {
    try {
      const view = await (await fetch(`${gateway.url}/admin/endpoints`, { headers: asAdmin })).json();
      const e = view.data[0].endpoints.find((x) => x.url === victim);
      samples.push({ t: now(), ok: e.requests - e.failures, circuit: e.circuit });
    } catch {
      // a sample lost is a sample lost
    }
  }, 50);

  const killer = (async () => {
    await new Promise((r) => setTimeout(r, KILL_AT));
    engines[0].child.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, RETURN_AT - KILL_AT));
    await startEngine(ports[0], { parallel: 4, contextSize: 1024, dataDir });
  })();

  await Promise.all([...Array.from({ length: IN_FLIGHT }, (_, w) => worker(w)), killer]);
  clearInterval(sampler);

  const okAtKill = samples.filter((s) => s.t <= KILL_AT).at(-1)?.ok ?? 0;
  const lastSuccessAfterKill = samples.filter((s) => s.t > KILL_AT && s.t < RETURN_AT && s.ok > okAtKill).at(-1);
  const stoppedAt = samples.find((s) => s.t > KILL_AT && s.circuit !== 'closed')?.t;
  const okAtReturn = samples.filter((s) => s.t <= RETURN_AT).at(-1)?.ok ?? 0;
  const backAt = samples.find((s) => s.t > RETURN_AT && s.ok > okAtReturn)?.t;
  console.table([{
    'served': counts.served,
    'failed before stream': counts.failedBeforeStream,
    'broke mid-stream': counts.brokeMidStream,
    'ms until dead replica left (circuit open)': stoppedAt === undefined ? 'never' : Math.round(stoppedAt - KILL_AT),
    'successes on it after kill': lastSuccessAfterKill ? lastSuccessAfterKill.ok - okAtKill : 0,
    'ms until traffic again after return': backAt === undefined ? 'never' : Math.round(backAt - RETURN_AT),
  }]);
  if (failures.length) console.log('failures:', failures.slice(0, 5));
} finally {
  stopAll();
}
