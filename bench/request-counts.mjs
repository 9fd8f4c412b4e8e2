// What one request does, counted: socket writes (to the client, the
// upstream, Redis and stdout), Redis round trips (writes to its socket:
// each a command or a script call, or a pipeline of them, with its answer
// awaited), the reads of Redis's replies (each a wake of the event loop,
// however many replies it brings) and the commands Redis ran (scripts' own
// included, from INFO commandstats), JSON parses and stringifies (and those
// of 1 KiB or more: a whole body), the garbage collector's runs, the
// bytes allocated and the promises made. This build, and a
// revision's where one is named, each a `parley serve` loaded with
// count-hook.mjs, the log line per request on, in front of the fast
// upstream; autocannon at each connection count after a warm-up.
//
//   npm run build && node bench/request-counts.mjs [revision, none] [seconds per run, 8] [connections, 1,32] [modes, whole,streamed]
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { apiLoad, benchModel, buildOf, countHook, forked, hookCounts, ROOT, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';

const REVISION = process.argv[2] && process.argv[2] !== 'none' ? process.argv[2] : undefined;
const SECONDS = Number(process.argv[3] ?? 8);
const CONNECTIONS = (process.argv[4] ?? '1,32').split(',').map(Number);
const MODES = (process.argv[5] ?? 'whole,streamed').split(',');

/** The counts a hooked Parley has made so far, and Redis's commands and script calls. */
async function snapshot(parley) {
  const counts = await hookCounts(parley.child);
  const stats = execFileSync('redis-cli', ['-s', join(parley.dataDir, 'redis/redis.sock'), 'info', 'commandstats'], { encoding: 'utf8' });
  let commands = 0;
  let scripts = 0;
  for (const [, name, calls] of stats.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
    if (name === 'info') continue;
    if (name.startsWith('eval')) scripts += Number(calls);
    else commands += Number(calls);
  }
  return { ...counts, redisCommands: commands, redisScripts: scripts };
}

async function hooked(label, root) {
  const parley = await startParley([benchModel(upstream)], { failover: { queueTimeoutMs: 200 } }, countHook(), undefined, root);
  return { label, ...parley };
}

const per = (n, requests, scale = 1) => Math.round((n / requests) * scale * 100) / 100;

let upstream;
try {
  const other = REVISION && buildOf(REVISION);
  const { port } = await forked('bench/fast-upstream.mjs', ['0']);
  upstream = `http://127.0.0.1:${port}`;
  const gateways = [await hooked('this-build', ROOT)];
  if (other) gateways.push(await hooked(REVISION, other));
  const rows = [];
  for (const mode of MODES) {
    for (const g of gateways) await apiLoad(`${g.url}/v1`, { authorization: `Bearer ${g.key}` }, mode, 32, WARMUP_SECONDS / 2);
    for (const connections of CONNECTIONS) {
      for (const g of gateways) {
        const before = await snapshot(g);
        const r = await apiLoad(`${g.url}/v1`, { authorization: `Bearer ${g.key}` }, mode, connections, SECONDS);
        await sleep(300); // settlements and releases that follow the last replies
        const after = await snapshot(g);
        const n = r.requests.total;
        if (process.env.SITES) console.log(`${g.label} ${mode} ${connections}: bytes per request by allocation site`, after.sites.map(([site, bytes]) => `${Math.round(bytes / n)} ${site}`));
        const d = (f) => f(after) - f(before);
        rows.push({
          build: g.label,
          mode,
          connections,
          'req/s': Math.round(r.requests.average),
          'writes: client': per(d((c) => c.writes.client), n),
          upstream: per(d((c) => c.writes.upstream), n),
          'Redis round trips': per(d((c) => c.writes.redis), n),
          'Redis reply reads': per(d((c) => c.redisReads), n),
          stdout: per(d((c) => c.writes.stdout), n),
          'Redis scripts': per(d((c) => c.redisScripts), n),
          'Redis commands': per(d((c) => c.redisCommands), n),
          'JSON.parse (≥1 KiB)': `${per(d((c) => c.json.parse), n)} (${per(d((c) => c.json.parseBig), n)})`,
          'JSON.stringify (≥1 KiB)': `${per(d((c) => c.json.stringify), n)} (${per(d((c) => c.json.stringifyBig), n)})`,
          'scavenges per 1,000': per(d((c) => c.gc.scavenges), n, 1000),
          'KB allocated': per(d((c) => c.allocatedBytes), n, 1 / 1024),
          promises: per(d((c) => c.promises), n),
          errors: r.errors + r.non2xx,
        });
      }
    }
  }
  console.table(rows);
} finally {
  stopAll();
}
