// What each of Parley's fast paths earns, A/B in one run: this build against
// a copy of it with that one path switched off (patched in its dist), on 32
// connections (or as many as asked) to the fast scripted upstream, the two taking turns, in the
// reverse order every other round. A path that does not move its figure
// should go (STYLE.md, plain before fast).
//
//   quick-path           streamed chat: the dialect's quick path (upstream/quick-events.ts) against every event parsed as JSON
//   embeddings-in-place  embeddings: vectors passed on unread (upstream/embeddings-in-place.ts) against read and written again
//   batched-releases     whole chat: a turn's fleet slot releases in one ZREM per set (routing/fleet-slots.ts) against one ZREM per release
//   batched-log-lines    whole chat, logging: log lines written together (telemetry/request-log.ts) against a write per line
//   named-options        whole chat: an upstream call's options named one by one (upstream/client.ts) against the target spread into them
//   reused-leases        whole chat: a fleet slot's lease passed to the replica's next request (routing/fleet-slots.ts) against asking Redis at each request
//   turn-batches         whole chat: a turn's holds, settlements and slot admissions in one script call each (redis/turn-batches.ts) against a call per request
//
//   npm run build && node bench/fast-paths.mjs [paths, default all, comma-separated] [seconds per run, default 8] [rounds, default 4] [connections, default 32] [upstream first byte ms, default 0]
import { abRounds, benchModel, forked, patchedBuild, startParley, stopAll } from './support.mjs';

const PATHS = {
  'quick-path': { mode: 'streamed', patches: [['upstream/dialect.js', 'quick: quirks.chunkFraming && quickEvents(quirks.chunkFraming)', 'quick: undefined']] },
  'embeddings-in-place': { mode: 'embeddings', patches: [['upstream/dialect.js', 'inPlace: embeddingsInPlace,', 'inPlace: () => undefined,']] },
  'batched-releases': { mode: 'whole', patches: [['routing/fleet-slots.js', 'this.releases.add({ endpoint, lease });', 'void this.redis.zrem(leasesOf(endpoint, lease), lease).catch(() => undefined);']] },
  'batched-log-lines': { mode: 'whole', settings: { requestLog: true }, patches: [['telemetry/request-log.js', 'writeLine(`${JSON.stringify(line)}\\n`);', 'process.stdout.write(`${JSON.stringify(line)}\\n`);']] },
  'named-options': { mode: 'whole', patches: [['upstream/client.js', 'origin: target.origin,\n        path: target.path,', '...target,']] },
  'reused-leases': { mode: 'whole', patches: [['routing/fleet-slots.js', 'const REUSE_MS = POLL_MS;', 'const REUSE_MS = 0;']] },
  'turn-batches': { mode: 'whole', patches: [['redis/turn-batches.js', 'const MAX_BATCH = 64;', 'const MAX_BATCH = 1;']] },
};
const chosen = (process.argv[2] && process.argv[2] !== 'all' ? process.argv[2] : Object.keys(PATHS).join(',')).split(',');
const SECONDS = Number(process.argv[3] ?? 8);
const ROUNDS = Number(process.argv[4] ?? 4);
const CONNECTIONS = Number(process.argv[5] ?? 32);
const FIRST_BYTE_MS = process.argv[6] ?? '0';

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0', FIRST_BYTE_MS]);
  const models = [benchModel(`http://127.0.0.1:${port}`)];
  for (const name of chosen) {
    const { mode, patches, settings = { requestLog: false } } = PATHS[name];
    const shipped = await startParley(models, settings);
    const without = await startParley(models, settings, [], undefined, patchedBuild(`no-${name}`, patches));
    await abRounds(`${name} (${mode}, first byte ${FIRST_BYTE_MS} ms)`, [['this build', shipped], [`without ${name}`, without]], { mode, connections: CONNECTIONS, seconds: SECONDS, rounds: ROUNDS });
    for (const p of [shipped, without]) p.child.kill('SIGTERM');
  }
} finally {
  stopAll();
}
