// What recording one request's metrics costs the main thread: each of the
// Telemetry methods the request path calls, timed over many calls in this
// build, and in a revision's beside it where one is named.
//
//   npm run build && node bench/metrics-record.mjs [revision, none] [calls, 200000]
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildOf, ROOT } from './support.mjs';

const REVISION = process.argv[2] && process.argv[2] !== 'none' ? process.argv[2] : undefined;
const CALLS = Number(process.argv[3] ?? 200_000);

const record = { id: 'r', api: 'chat', account: 'acct', keyId: 'k', model: 'bench', modelLabel: 'bench', servedModel: 'bench', serviceTier: 'default', endpoint: 'http://127.0.0.1:40000/v1', provider: 'vllm', attempts: 1, promptTokens: 20, cachedTokens: 0, completionTokens: 256, cost: 532, firstByteMs: 1.2, streamed: true };
const endpoint = { url: 'http://127.0.0.1:40000/v1', kind: 'vllm', upstreamModel: 'bench' };

/** µs per call of each method, in the build under `root`. */
async function timings(root) {
  const { Telemetry } = await import(pathToFileURL(join(root, 'dist/telemetry/telemetry.js')).href);
  const telemetry = new Telemetry({ snapshot: () => [] });
  const calls = {
    recordRequest: () => telemetry.recordRequest('POST /v1/chat/completions', 200, null, 0.01),
    recordGeneration: () => telemetry.recordGeneration(record, 0.01, undefined, 0),
    recordUpstreamCall: () => telemetry.recordUpstreamCall(record, endpoint, 0.001),
    recordFirstToken: () => telemetry.recordFirstToken(record, 0.001),
  };
  const row = {};
  for (const [name, call] of Object.entries(calls)) {
    for (let i = 0; i < CALLS / 10; i++) call();
    const started = performance.now();
    for (let i = 0; i < CALLS; i++) call();
    row[name] = Number((((performance.now() - started) * 1000) / CALLS).toFixed(2));
  }
  await telemetry.shutdown();
  return row;
}

const rows = { 'this build': await timings(ROOT) };
if (REVISION) rows[REVISION] = await timings(buildOf(REVISION));
console.log('µs per call');
console.table(rows);
