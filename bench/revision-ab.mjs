// This build against another revision's, A/B in one run: the other is built
// here from git, on this checkout's node_modules. Chat requests for
// 256-token replies (whole or streamed, on 1 connection by default: light
// load) to the same fast scripted upstream, the two taking turns, in the
// reverse order every other round. Prints each round's requests/s and the
// ratio this build ÷ the other. It is how a fast path earns its place: this
// build with it against a revision without it.
//
//   npm run build && node bench/revision-ab.mjs [revision, default 95dfa38] [mode: whole|streamed|embeddings, default whole] [connections, default 1] [seconds per run, default 10] [rounds, default 4] [upstream first byte ms, default 0] [spread ms either side, default 0]
import { abRounds, buildOf, forked, revisionModel, startParley, stopAll } from './support.mjs';

const REVISION = process.argv[2] ?? '95dfa38';
const MODE = process.argv[3] ?? 'whole';
const CONNECTIONS = Number(process.argv[4] ?? 1);
const SECONDS = Number(process.argv[5] ?? 10);
const ROUNDS = Number(process.argv[6] ?? 4);
const FIRST_BYTE_MS = Number(process.argv[7] ?? 0);
const SPREAD_MS = Number(process.argv[8] ?? 0);

try {
  const other = buildOf(REVISION);
  const { port } = await forked('bench/fast-upstream.mjs', ['0', String(FIRST_BYTE_MS), String(SPREAD_MS)]);
  const models = [revisionModel(`http://127.0.0.1:${port}`, MODE)];
  const targets = [['this build', await startParley(models)], [REVISION, await startParley(models, {}, [], undefined, other)]];
  await abRounds(`${MODE}, ${CONNECTIONS} connection(s), upstream first byte ${FIRST_BYTE_MS} ms${SPREAD_MS ? ` ± ${SPREAD_MS}` : ''}`, targets, { mode: MODE, connections: CONNECTIONS, seconds: SECONDS, rounds: ROUNDS });
} finally {
  stopAll();
}
