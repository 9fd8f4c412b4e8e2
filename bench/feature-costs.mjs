// What each feature of the request path costs, A/B in one run: this build
// as shipped against a copy of it with one feature switched off (a setting,
// or patched out of its dist), on 32 connections (or as many as asked) of
// whole 256-token replies from the fast scripted upstream, the two taking
// turns; prints the ratio (shipped ÷ without: below 1 is the cost) and each
// one's main-thread CPU per request. Where a feature costs more than it
// must, this names it; the features themselves stay.
//
//   log-line       a JSON log line per request on stdout (a pipe the script reads), against `requestLog: false`
//   genai-metrics  the request and GenAI metrics recorded per request (telemetry/telemetry.ts), against recording none
//   fleet-slots    the endpoint's slots taken from the fleet's count in Redis (routing/fleet-slots.ts), against this replica's own count
//   fleet-load     this replica's loads written to Redis every 100 ms and the others' read (routing/fleet-load.ts), against none
//   together       the four above off at once
//
//   npm run build && node bench/feature-costs.mjs [features, default all, comma-separated] [seconds per run, default 8] [rounds, default 4] [connections, default 32] [upstream first byte ms, default 0] [spread ms, default 0]
import { abRounds, benchModel, FLEET_SLOTS_OFF, forked, patchedBuild, ROOT, startParley, stopAll } from './support.mjs';

/** A method of the built Telemetry class that returns at once. */
const unrecorded = (signature) => ['telemetry/telemetry.js', `${signature} {`, `${signature} { return;`];

const FEATURES = {
  'log-line': { without: { requestLog: false } },
  'genai-metrics': {
    patches: [
      unrecorded('recordRequest(route, status, code, seconds)'),
      unrecorded('recordGeneration(r, seconds, errorType, topAccounts)'),
      unrecorded('recordFirstToken(r, seconds)'),
      unrecorded('recordUpstreamCall(r, endpoint, seconds, errorType)'),
    ],
  },
  'fleet-slots': { patches: [FLEET_SLOTS_OFF] },
  'fleet-load': { patches: [['routing/router.js', 'this.fleet = redis && new FleetLoad(', 'this.fleet = undefined && new FleetLoad(']] },
};
// All four off at once: what they cost together, where each alone is within the VM's spread.
FEATURES.together = { without: FEATURES['log-line'].without, patches: ['genai-metrics', 'fleet-slots', 'fleet-load'].flatMap((f) => FEATURES[f].patches) };
const chosen = process.argv[2] && process.argv[2] !== 'all' ? process.argv[2].split(',') : Object.keys(FEATURES).filter((f) => f !== 'together');
const SECONDS = Number(process.argv[3] ?? 8);
const ROUNDS = Number(process.argv[4] ?? 4);
const CONNECTIONS = Number(process.argv[5] ?? 32);
const FIRST_BYTE_MS = process.argv[6] ?? '0';
const SPREAD_MS = process.argv[7] ?? '0';

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0', FIRST_BYTE_MS, SPREAD_MS]);
  const models = [benchModel(`http://127.0.0.1:${port}`)];
  const shippedSettings = { requestLog: true };
  for (const name of chosen) {
    const { without = shippedSettings, patches } = FEATURES[name];
    const shipped = await startParley(models, shippedSettings);
    const off = await startParley(models, without, [], undefined, patches ? patchedBuild(`no-${name}`, patches) : ROOT);
    await abRounds(`${name} (whole, upstream ${FIRST_BYTE_MS}±${SPREAD_MS} ms)`, [['as shipped', shipped], [`without ${name}`, off]], { mode: 'whole', connections: CONNECTIONS, seconds: SECONDS, rounds: ROUNDS });
    for (const p of [shipped, off]) p.child.kill('SIGTERM');
  }
} finally {
  stopAll();
}
