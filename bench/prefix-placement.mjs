// How long placing a model's affinity keys takes (routing/prefix-placement.ts):
// every replica places every known key again whenever the fleet forgets one,
// on the main thread, before the next request is routed. This build and a
// revision in one run, each placing the same keys over 4, 8 and 32
// endpoints (named as URLs, as endpoints are); the median of 9 runs each.
//
//   npm run build && node bench/prefix-placement.mjs [revision, none] [keys, 4096]
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildOf, median, ROOT } from './support.mjs';

const REVISION = process.argv[2] ?? 'none';
const KEYS = Number(process.argv[3] ?? 4096);
const keys = Array.from({ length: KEYS }, (_, i) => `k:${String(i).padStart(22, '0')}`);
const builds = [['this build', ROOT]];
if (REVISION !== 'none') builds.push([REVISION, buildOf(REVISION)]);
const rows = [];
for (const [name, root] of builds) {
  const { PrefixPlacement } = await import(pathToFileURL(join(root, 'dist/routing/prefix-placement.js')).href);
  const row = { build: name };
  for (const n of [4, 8, 32]) {
    const endpoints = Array.from({ length: n }, (_, i) => ({ name: `http://10.0.0.${i}:8000/v1`, weight: 1 }));
    const times = [];
    for (let run = 0; run < 12; run++) {
      const started = performance.now();
      new PrefixPlacement(keys, endpoints, 0.25);
      if (run >= 3) times.push(performance.now() - started);
    }
    row[`${n} endpoints, ms`] = median(times).toFixed(1);
  }
  rows.push(row);
}
console.table(rows);
