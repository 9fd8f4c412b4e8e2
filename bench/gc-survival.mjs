// What the young-generation collector costs each gateway under the streamed
// load of gateway-throughput.mjs: per 1,000 requests, how many scavenges and
// their pause, and per scavenge what it copied (survived) and moved to the
// old generation (promoted), from V8's --trace-gc-nvp lines; and how many
// full mark-compacts the promotions led to. Both run with 64 MB semi-spaces.
//
// A request's objects die with it, so a scavenge should find little alive:
// what survives is copied, and what survives twice is promoted and then
// waits for a full collection. Parley's scavenges copy and promote far more
// than the bare pass-through's, which is time on the main thread and on V8's
// helper threads that the throughput ratio pays for.
//
//   npm run build && node bench/gc-survival.mjs [seconds, default 10]
import { benchModel, chatLoad, forked, median, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';

const seconds = Number(process.argv[2] ?? 10);
const SEMI_SPACE = '--max-semi-space-size=64';

/** Keeps what a child prints (a pipe left unread would block it once full); `take` returns the nvp events since the last take. */
function gcLog(stdout) {
  let text = '';
  stdout.on('data', (d) => (text += d));
  return {
    take() {
      const lines = text.split('\n').filter((l) => l.includes(' gc='));
      text = '';
      return lines.map((l) => Object.fromEntries([...l.matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1], m[2]])));
    },
  };
}

const mb = (bytes) => (bytes / 1e6).toFixed(2);

try {
  const upstream = `http://127.0.0.1:${(await forked('bench/fast-upstream.mjs', ['0'])).port}`;
  const proxy = await forked('bench/bare-proxy.mjs', [upstream, '0'], [SEMI_SPACE, '--trace-gc-nvp']);
  const parley = await startParley([benchModel(upstream)], { failover: { queueTimeoutMs: 200 } }, ['--trace-gc-nvp']);
  const targets = [
    { name: 'bare http-proxy-3', url: `http://127.0.0.1:${proxy.port}`, headers: {}, gc: gcLog(proxy.child.stdout) },
    { name: 'parley', url: parley.url, headers: { authorization: `Bearer ${parley.key}` }, gc: gcLog(parley.child.stdout) },
  ];
  const rows = [];
  for (const t of targets) {
    const url = `${t.url}/v1/chat/completions`;
    await chatLoad(url, t.headers, true, 32, WARMUP_SECONDS);
    t.gc.take();
    const result = await chatLoad(url, t.headers, true, 32, seconds);
    const events = t.gc.take();
    const scavenges = events.filter((e) => e.gc === 's');
    const perThousand = 1000 / result.requests.total;
    rows.push({
      target: t.name,
      'req/s': Math.round(result.requests.average),
      'scavenges /1k req': (scavenges.length * perThousand).toFixed(2),
      'scavenge ms /1k req': (scavenges.reduce((sum, e) => sum + Number(e.pause), 0) * perThousand).toFixed(1),
      'median pause ms': median(scavenges.map((e) => Number(e.pause))).toFixed(1),
      'survived MB': mb(median(scavenges.map((e) => Number(e.new_space_survived)))),
      'promoted MB': mb(median(scavenges.map((e) => Number(e.promoted)))),
      'mark-compacts': events.filter((e) => e.gc === 'mc' || e.gc === 'ms').length,
    });
  }
  console.table(rows);
} finally {
  stopAll();
}
