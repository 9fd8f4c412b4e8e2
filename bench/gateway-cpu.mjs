// Where the throughput ratio comes from: CPU time per request of the
// gateway's main thread, and of its whole process, for the bare http-proxy-3
// pass-through and for Parley, under the same load as gateway-throughput.mjs.
//
// Both gateways run their JavaScript on one thread, and under 32 connections
// on a 2-core machine that thread is the bottleneck (busy ~90% of the time,
// while the machine keeps some idle): the ratio of requests/s follows the
// ratio of main-thread time per request, not the CPU Redis, the upstream or
// the load generator spend. Those still share the machine's two cores with
// it, so the table shows them too: Parley's private redis-server, and the
// CPU of every process the run needs (gateway, its Redis, the upstream and
// this process, which generates the load) per request. Beside them, each
// gateway's read and write system calls per request (for Parley, its Redis
// traffic on top of the client's and the upstream's). Times and counts come
// from /proc, so the run needs Linux.
//
// The targets take turns for `rounds` rounds of `seconds` each; the table
// shows each one's median, and the ratio is the median of same-round ratios.
// Each further argument is another checkout of Parley (built), measured the
// same way: an A/B of two versions of the code in one run, with the median
// of each one's same-round ratios to this checkout.
//
//   npm run build && node bench/gateway-cpu.mjs [stream|whole] [rounds, default 10] [seconds, default 3] [checkout ...]
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { benchModel, chatLoad, forked, median, ROOT, startParley, stopAll, streamReaderOf, WARMUP_SECONDS } from './support.mjs';

const [mode = 'stream', rounds = '10', seconds = '3', ...checkouts] = process.argv.slice(2);
const stream = mode === 'stream';
const CLOCK_TICKS_PER_SECOND = 100;

/** User + system CPU microseconds of one thread (`/proc/PID/task/TID/stat`) or of a whole process (`/proc/PID/stat`). */
function cpuMicros(statPath) {
  const fields = readFileSync(statPath, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / CLOCK_TICKS_PER_SECOND;
}

/** The processes `pid` started (for Parley, its private redis-server). */
function childPids(pid) {
  return readdirSync(`/proc/${pid}/task`).flatMap((tid) => readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
}

/** A process's read and write system calls so far (`/proc/PID/io`): each costs tens of µs on a small VM. */
function syscalls(pid) {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  return { reads: Number(/^syscr: (\d+)/m.exec(io)[1]), writes: Number(/^syscw: (\d+)/m.exec(io)[1]) };
}

/** Each checkout's bench helpers track the servers they start; all are stopped at the end. */
const stoppers = [stopAll];
try {
  const fast = await forked('bench/fast-upstream.mjs', ['0']);
  const upstream = `http://127.0.0.1:${fast.port}`;
  const proxy = await forked('bench/bare-proxy.mjs', [upstream, '0']);
  const targets = [{ name: 'bare http-proxy-3', url: `http://127.0.0.1:${proxy.port}`, headers: {}, pid: proxy.pid }];
  for (const root of [ROOT, ...checkouts]) {
    // Each checkout starts its own `parley serve`, through its own bench helpers.
    const helpers = root === ROOT ? { startParley, stopAll } : await import(join(root, 'bench/support.mjs'));
    if (root !== ROOT) stoppers.push(helpers.stopAll);
    const parley = await helpers.startParley([benchModel(upstream)], { failover: { queueTimeoutMs: 200 } });
    const pid = parley.child.pid;
    targets.push({ name: `parley ${root} (${(await streamReaderOf(root)).replace(/ \(.*/, '')})`, url: parley.url, headers: { authorization: `Bearer ${parley.key}` }, pid, helpers: childPids(pid) });
  }
  for (const t of targets) await chatLoad(`${t.url}/v1/chat/completions`, t.headers, stream, 32, WARMUP_SECONDS);
  const runs = new Map(targets.map((t) => [t, []]));
  for (let round = 0; round < Number(rounds); round++) {
    // Alternate the order, so that neither side always runs first in a round.
    for (const t of round % 2 ? [...targets].reverse() : targets) {
      const main = `/proc/${t.pid}/task/${t.pid}/stat`;
      const whole = `/proc/${t.pid}/stat`;
      const helpers = () => (t.helpers ?? []).reduce((sum, pid) => sum + cpuMicros(`/proc/${pid}/stat`), 0);
      const others = () => cpuMicros(`/proc/${fast.pid}/stat`) + cpuMicros(`/proc/${process.pid}/stat`);
      const before = { main: cpuMicros(main), whole: cpuMicros(whole), helpers: helpers(), others: others(), io: syscalls(t.pid) };
      const r = await chatLoad(`${t.url}/v1/chat/completions`, t.headers, stream, 32, Number(seconds));
      const n = r.requests.total;
      const io = syscalls(t.pid);
      runs.get(t).push({
        rps: r.requests.average,
        main: (cpuMicros(main) - before.main) / n,
        whole: (cpuMicros(whole) - before.whole) / n,
        helpers: (helpers() - before.helpers) / n,
        machine: (cpuMicros(whole) - before.whole + helpers() - before.helpers + others() - before.others) / n,
        reads: (io.reads - before.io.reads) / n,
        writes: (io.writes - before.io.writes) / n,
        errors: r.errors + r.non2xx,
      });
    }
  }
  const bare = runs.get(targets[0]);
  console.table(targets.map((t) => {
    const list = runs.get(t);
    return {
      target: t.name,
      'req/s': Math.round(median(list.map((x) => x.rps))),
      'main thread µs/request': Math.round(median(list.map((x) => x.main))),
      'process µs/request': Math.round(median(list.map((x) => x.whole))),
      'its redis-server µs/request': t.helpers ? Math.round(median(list.map((x) => x.helpers))) : '',
      'all processes µs/request': Math.round(median(list.map((x) => x.machine))),
      'main thread ÷ bare': median(list.map((x, i) => x.main / bare[i].main)).toFixed(2),
      'req/s ÷ bare': median(list.map((x, i) => x.rps / bare[i].rps)).toFixed(2),
      'reads/request': median(list.map((x) => x.reads)).toFixed(2),
      'writes/request': median(list.map((x) => x.writes)).toFixed(2),
      errors: list.reduce((sum, x) => sum + x.errors, 0),
    };
  }));
  // An A/B of checkouts: each further one against the first, round by round, where the VM's drift between rounds cancels out.
  const first = runs.get(targets[1]);
  for (const t of targets.slice(2)) {
    const list = runs.get(t);
    const mainRatios = list.map((x, i) => x.main / first[i].main);
    const processRatios = list.map((x, i) => x.whole / first[i].whole);
    const lower = mainRatios.filter((r) => r < 1).length;
    console.log(`${t.name} ÷ ${targets[1].name}: main thread ${median(mainRatios).toFixed(3)} (lower in ${lower} of ${mainRatios.length} rounds), process ${median(processRatios).toFixed(3)}`);
  }
} finally {
  for (const stop of stoppers) stop();
}
