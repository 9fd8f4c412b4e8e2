// Loaded into a Parley under measurement (`--import`) by request-counts.mjs
// and latency-tail.mjs:
// counts what its process does, and writes the counts so far to
// counts-<pid>.json in the folder COUNT_HOOK_DIR names, on SIGUSR2
// (support.mjs's hookCounts reads them). Socket writes (system calls on a socket
// or pipe) by peer: the clients, the upstream, Redis (its unix socket) and
// stdout; the reads of Redis's replies; JSON.parse and JSON.stringify
// calls, and those of 1 KiB or more (a whole body, not a field); the
// scavenges, and the longest pause of any
// collection; how late the event loop ran its timers (its delay:
// what a request that arrives waits before its turn); and, unless
// COUNT_HOOK_ALLOCATIONS=0, the bytes allocated, from V8's sampling heap
// profiler (one sample per SAMPLE_BYTES, objects since freed included),
// and the promises made (each await of a promise makes one more, and an
// async function's call one), both of which slow the process down. The delay and the longest pause are since
// the last dump; the rest are totals.
import { createHook } from 'node:async_hooks';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';
import net from 'node:net';
import { PerformanceObserver, constants, monitorEventLoopDelay } from 'node:perf_hooks';

const counts = {
  writes: { client: 0, upstream: 0, redis: 0, stdout: 0 },
  /** Reads of Redis's replies: a wake of the event loop for Redis, however many replies each brings. */
  redisReads: 0,
  json: { parse: 0, stringify: 0, parseBig: 0, stringifyBig: 0 },
  gc: { scavenges: 0, longestMs: 0 },
  allocatedBytes: 0,
  promises: 0,
};
const BIG = 1024;

const peer = Symbol('peer');
const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  const options = Array.isArray(args[0]) ? args[0][0] : args[0];
  const path = typeof options === 'string' ? options : options?.path;
  this[peer] = path ? 'redis' : 'upstream';
  if (path) this.on('data', () => counts.redisReads++);
  return connect.apply(this, args);
};
const writeGeneric = net.Socket.prototype._writeGeneric;
net.Socket.prototype._writeGeneric = function (...args) {
  counts.writes[this === process.stdout ? 'stdout' : (this[peer] ?? 'client')]++;
  return writeGeneric.apply(this, args);
};

const { parse, stringify } = JSON;
JSON.parse = function (text, ...rest) {
  counts.json.parse++;
  if (typeof text === 'string' && text.length >= BIG) counts.json.parseBig++;
  return parse(text, ...rest);
};
JSON.stringify = function (...args) {
  const text = stringify(...args);
  counts.json.stringify++;
  if (typeof text === 'string' && text.length >= BIG) counts.json.stringifyBig++;
  return text;
};

new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    if (e.detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) counts.gc.scavenges++;
    counts.gc.longestMs = Math.max(counts.gc.longestMs, e.duration);
  }
}).observe({ entryTypes: ['gc'] });

const SAMPLE_BYTES = 16 * 1024;
const sampling = { samplingInterval: SAMPLE_BYTES, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true };
const profiler = process.env.COUNT_HOOK_ALLOCATIONS === '0' ? undefined : new Session();
profiler?.connect();
if (profiler) createHook({ init: (_id, type) => void (type === 'PROMISE' && counts.promises++) }).enable();
await profiler?.post('HeapProfiler.startSampling', sampling);
const loopDelay = monitorEventLoopDelay({ resolution: 1 });
loopDelay.enable();

/** The bytes the profile's samples stand for, in every allocation site. */
const sampledBytes = (node) => node.selfSize + node.children.reduce((sum, child) => sum + sampledBytes(child), 0);

/** The allocation sites that allocated most since the last dump: function, file and line, bytes. */
function topSites(head, count = 25) {
  const bySite = new Map();
  const visit = (node) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const site = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${lineNumber + 1}`;
    bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
    node.children.forEach(visit);
  };
  visit(head);
  return [...bySite].sort((a, b) => b[1] - a[1]).slice(0, count);
}

// Each dump ends a profile and starts the next, so that samples do not pile up over a long run.
process.on('SIGUSR2', async () => {
  if (profiler) {
    const { profile } = await profiler.post('HeapProfiler.stopSampling');
    await profiler.post('HeapProfiler.startSampling', sampling);
    counts.allocatedBytes += sampledBytes(profile.head);
    counts.sites = topSites(profile.head);
  }
  const ms = (ns) => Math.round(ns / 1e4) / 100;
  counts.loopDelayMs = { p99: ms(loopDelay.percentile(99)), max: ms(loopDelay.max) };
  writeFileSync(join(process.env.COUNT_HOOK_DIR, `counts-${process.pid}.json`), stringify(counts));
  loopDelay.reset();
  counts.gc.longestMs = 0;
});
