// What Parley's telemetry costs, A/B in one run: this build as shipped (its
// GenAI metrics, and a log line per request on stdout, a pipe this script
// reads and drops) against a copy of the same build whose telemetry records
// nothing (its record methods return at once) and whose log line is off;
// then the same with the log line off on both, for the metrics alone. 32
// connections to the fast scripted upstream, the two taking turns, in the
// reverse order every other round. Prints each round's requests/s and the
// ratio shipped ÷ off.
//
//   npm run build && node bench/telemetry-cost.mjs [mode: whole|streamed, default streamed] [seconds per run, default 5] [rounds, default 4]
import { abRounds, benchModel, forked, patchedBuild, startParley, stopAll } from './support.mjs';

const MODE = process.argv[2] ?? 'streamed';
const SECONDS = Number(process.argv[3] ?? 5);
const ROUNDS = Number(process.argv[4] ?? 4);
const RECORDERS = ['recordRequest', 'recordGeneration', 'recordFirstToken', 'recordUpstreamCall', 'recordCharge'];

/** A copy of this build whose telemetry records nothing: each recorder returns at once. */
const silentBuild = () => patchedBuild('no-telemetry', RECORDERS.map((name) => ['telemetry/telemetry.js', new RegExp(`(\\n    ${name}\\([^)]*\\) \\{\\n)`), '$1        return;\n']));

const options = { mode: MODE, connections: 32, seconds: SECONDS, rounds: ROUNDS };

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0']);
  const models = [benchModel(`http://127.0.0.1:${port}`)];
  const silent = silentBuild();
  const settings = { failover: { queueTimeoutMs: 200 } };
  const off = await startParley(models, { ...settings, requestLog: false }, [], undefined, silent);
  await abRounds(`${MODE}, telemetry as shipped`, [['shipped', await startParley(models, settings)], ['off', off]], options);
  await abRounds(`${MODE}, metrics alone (no log line)`, [['metrics', await startParley(models, { ...settings, requestLog: false })], ['off', off]], options);
} finally {
  stopAll();
}
