// Where a request's main-thread CPU goes, this build beside another
// revision: each a `parley serve` under V8's CPU profiler (--cpu-prof), the
// two taking turns serving the same load from the fast upstream after a
// warm-up round. Prints µs per request (self time over the requests served)
// by area (a folder of dist/, a package, a part of Node, or V8's own: the
// garbage collector, a native call such as writev) and by function, the
// largest differences first. The profiler slows both alike; its figures say
// which parts cost more, not a gateway's speed (revision-ab.mjs does that).
//
//   npm run build && node bench/cpu-profile.mjs [revision, 4e458b7] [mode, whole] [connections, 32] [seconds per run, 10] [rounds, 3]
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiLoad, buildOf, forked, revisionModel, startParley, stopAll } from './support.mjs';

const REVISION = process.argv[2] ?? '4e458b7';
const MODE = process.argv[3] ?? 'whole';
const CONNECTIONS = Number(process.argv[4] ?? 32);
const SECONDS = Number(process.argv[5] ?? 10);
const ROUNDS = Number(process.argv[6] ?? 3);
const SHOWN = 30;

/** Where a profiled function lives: its dist/ folder, its package, its part of Node, or V8's own name for it. */
function areaOf({ url, functionName }) {
  if (!url) return functionName || '(native)';
  if (url.includes('/node_modules/')) {
    const [first, second] = url.split('/node_modules/').at(-1).split('/');
    return first.startsWith('@') ? `${first}/${second}` : first;
  }
  if (url.includes('/dist/')) return `dist/${url.split('/dist/').at(-1).split('/')[0]}`;
  if (url.startsWith('node:')) return url.split('/').slice(0, 2).join('/');
  return url;
}

const functionOf = ({ url, functionName, lineNumber }) => `${functionName || '(anonymous)'} ${url.split('/').slice(-2).join('/')}${url ? `:${lineNumber + 1}` : ''}`;

/** Self time in µs by area and by function, from a .cpuprofile, idle time left out. */
function selfTimes(file) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const perSample = (profile.endTime - profile.startTime) / profile.samples.length;
  const byArea = new Map();
  const byFunction = new Map();
  for (const node of profile.nodes) {
    if (!node.hitCount || node.callFrame.functionName === '(idle)') continue;
    const us = node.hitCount * perSample;
    for (const [map, name] of [[byArea, areaOf(node.callFrame)], [byFunction, functionOf(node.callFrame)]]) map.set(name, (map.get(name) ?? 0) + us);
  }
  return { byArea, byFunction };
}

/** Rows of µs per request for each name, both builds, the largest differences first. */
function printTable(title, names, [a, b], key) {
  console.log(`\n${title}, µs per request: this build, ${REVISION}, difference`);
  const rows = [...names].map((n) => [n, (a[key].get(n) ?? 0) / a.requests, (b[key].get(n) ?? 0) / b.requests]);
  rows.sort((x, y) => Math.abs(y[1] - y[2]) - Math.abs(x[1] - x[2]));
  for (const [n, x, y] of rows.slice(0, SHOWN)) console.log(`${x.toFixed(1).padStart(7)} ${y.toFixed(1).padStart(7)} ${(x - y).toFixed(1).padStart(7)}  ${n}`);
}

try {
  const other = buildOf(REVISION);
  const { port } = await forked('bench/fast-upstream.mjs', ['0', '0']);
  const model = revisionModel(`http://127.0.0.1:${port}`, MODE);
  const folders = [mkdtempSync(join(tmpdir(), 'parley-profile-')), mkdtempSync(join(tmpdir(), 'parley-profile-'))];
  const roots = [undefined, other];
  const targets = await Promise.all(['this build', REVISION].map(async (name, i) => ({ name, requests: 0, parley: await startParley([model], {}, ['--cpu-prof', `--cpu-prof-dir=${folders[i]}`], undefined, roots[i]) })));
  // Round 0 warms both up; its requests are counted too, as the profile covers them.
  for (let round = 0; round <= ROUNDS; round++) {
    for (const t of round % 2 ? [...targets].reverse() : targets) {
      const r = await apiLoad(`${t.parley.url}/v1`, { authorization: `Bearer ${t.parley.key}` }, MODE, CONNECTIONS, SECONDS);
      if (r.non2xx || r.errors) throw new Error(`${t.name}: ${r.non2xx} non-2xx, ${r.errors} errors`);
      t.requests += r.requests.total;
      console.log(`round ${round}${round ? '' : ' (warm-up)'}: ${t.name} ${Math.round(r.requests.average)} req/s`);
    }
  }
  // The profile is written as the process exits.
  await Promise.all(targets.map((t) => new Promise((resolve) => (t.parley.child.once('exit', resolve), t.parley.child.kill('SIGTERM')))));
  const measured = targets.map((t, i) => ({ requests: t.requests, ...selfTimes(join(folders[i], readdirSync(folders[i]).find((f) => f.endsWith('.cpuprofile')))) }));
  const total = (m) => [...m.byArea.values()].reduce((s, us) => s + us, 0) / m.requests;
  console.log(`\n${MODE}, ${CONNECTIONS} connections, ${targets.map((t) => `${t.name} ${t.requests}`).join(' and ')} requests: main-thread CPU per request (not idle), profiled: this build ${total(measured[0]).toFixed(1)} µs, ${REVISION} ${total(measured[1]).toFixed(1)} µs`);
  printTable('By area', new Set(measured.flatMap((m) => [...m.byArea.keys()])), measured, 'byArea');
  printTable('By function', new Set(measured.flatMap((m) => [...m.byFunction.keys()])), measured, 'byFunction');
} finally {
  stopAll();
}
