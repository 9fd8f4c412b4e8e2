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
import { cpSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiLoad, benchModel, forked, median, ROOT, startParley, stopAll } from './support.mjs';

const MODE = process.argv[2] ?? 'streamed';
const SECONDS = Number(process.argv[3] ?? 5);
const ROUNDS = Number(process.argv[4] ?? 4);
const RECORDERS = ['recordRequest', 'recordGeneration', 'recordFirstToken', 'recordUpstreamCall', 'recordCharge'];

/** A copy of this build whose telemetry records nothing. */
function silentBuild() {
  const root = mkdtempSync(join(tmpdir(), 'parley-no-telemetry-'));
  for (const entry of ['bin', 'dist', 'config', 'package.json']) cpSync(join(ROOT, entry), join(root, entry), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(root, 'node_modules'));
  const file = join(root, 'dist/telemetry/telemetry.js');
  let text = readFileSync(file, 'utf8');
  for (const name of RECORDERS) {
    const before = text;
    text = text.replace(new RegExp(`(\\n    ${name}\\([^)]*\\) \\{\\n)`), '$1        return;\n');
    if (text === before) throw new Error(`no ${name} in the build's telemetry`);
  }
  writeFileSync(file, text);
  return root;
}

async function abRounds(label, shipped, off) {
  const headers = (p) => ({ authorization: `Bearer ${p.key}` });
  const targets = [['shipped', shipped], ['off', off]];
  for (const [, p] of targets) await apiLoad(`${p.url}/v1`, headers(p), MODE, 32, 15);
  const ratios = [];
  for (let round = 0; round < ROUNDS; round++) {
    const rate = {};
    for (const [name, p] of round % 2 ? [...targets].reverse() : targets) rate[name] = (await apiLoad(`${p.url}/v1`, headers(p), MODE, 32, SECONDS)).requests.average;
    ratios.push(rate.shipped / rate.off);
    console.log(`${label}, round ${round + 1}: ${Math.round(rate.shipped)} against ${Math.round(rate.off)} req/s, ${ratios.at(-1).toFixed(2)}`);
  }
  console.log(`${label}: median ${median(ratios).toFixed(2)} (${ratios.map((r) => r.toFixed(2)).join(' ')})`);
}

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0']);
  const models = [benchModel(`http://127.0.0.1:${port}`)];
  const silent = silentBuild();
  const settings = { failover: { queueTimeoutMs: 200 } };
  const off = await startParley(models, { ...settings, requestLog: false }, [], undefined, silent);
  await abRounds(`${MODE}, telemetry as shipped ÷ off`, await startParley(models, settings), off);
  await abRounds(`${MODE}, metrics alone (no log line) ÷ off`, await startParley(models, { ...settings, requestLog: false }), off);
} finally {
  stopAll();
}
