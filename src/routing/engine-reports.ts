// What each engine says of its own load (upstream/engine-load.ts), read on
// an interval and shared by the fleet. Parley's own counts miss the work an
// engine gets from elsewhere (a team's job pointed straight at it, a second
// gateway) and see twenty long agent sessions as twenty short chats; the
// engine's queue and KV-cache use do not.
//
// Each interval every replica asks Redis, in one script call, which
// endpoints are its to read this interval (the first replica to ask claims
// an endpoint for one interval) and what the fleet last read of every one.
// So an engine is read once per interval whatever the number of replicas,
// and all of them route on one picture. In the same call each replica sends
// how long its requests held a slot at each endpoint since its last turn,
// and takes every replica's, so that a queue is weighed by the fleet's hold
// time where the engine reports no run time of its own. Without Redis a
// replica reads every endpoint itself. A read that fails, times out or
// finds no load gauges is recorded as failed: routing then goes by Parley's
// own counts for that endpoint (as for a hosted API, which reports
// nothing), the admin view and /metrics say so, and no request waits on a
// read.
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { EngineLoad } from '../upstream/engine-load.js';
import { upstreamEngineLoad } from '../upstream/client.js';
import { LUA_NOW_MS, luaScript } from '../redis/lua-script.js';
import { redisKeys } from '../redis/keys.js';
import type { RoutedEndpoint } from './routing-table.js';

export interface EngineReadSettings {
  /** How often each engine is read, fleet-wide; 0: never. */
  intervalMs: number;
  timeoutMs: number;
}

/** Requests that gave back a slot, and how long they held it in all (ms). */
export interface Holds {
  requests: number;
  ms: number;
}

/** What routing knows of an engine's load, and where it comes from. */
export interface EngineReport {
  /** `engine`: a recent reading; `own-counts`: none, so Parley's own counts alone (`reason` says why). */
  source: 'engine' | 'own-counts';
  reason?: string;
  /** The last good reading, while it is recent. */
  load?: EngineLoad;
  /** Requests at the engine that the fleet did not send: running and waiting beyond the fleet's own when read. */
  external: number;
  /** The requests the engine runs at once, as it showed the last time it had a queue; absent until it has had one. */
  capacity?: number;
  /** How long a request ran there lately (ms), its queueing not counted, where the engine reports it. */
  runMs?: number;
}

/**
 * A reading as the fleet stores it: `seen`, the work from elsewhere this reading found; `external`, what two in a
 * row did; `capacity`, the most the engine ran while it had a queue, `sinceQueue` readings ago at the latest.
 */
type Reading = (EngineLoad & { seen: number; external: number; capacity?: number; sinceQueue: number; runMs?: number }) | { error: string };

/** Work from elsewhere below this is not told apart from the lag of the fleet's counts: a few requests, and a share of the fleet's. */
const EXTERNAL_MARGIN = { requests: 2, share: 0.25 };
/** How many readings without a queue an engine's capacity is kept for. */
const CAPACITY_READINGS = 30;
/** A reading older than this many intervals (its reader died, or Redis is away) is not routed on. */
const STALE_INTERVALS = 3;
/** A replica's holds count in the fleet's figure for this many intervals after it wrote them. */
const HELD_INTERVALS = 3;

// KEYS: the fleet's readings. ARGV: this replica, the interval (ms), its holds since its last turn (JSON, '' for
// none), then the endpoints' names. Claims, for one interval, each endpoint no replica has claimed; keeps this
// replica's holds (field `#held:<replica>`: no endpoint's name begins with #, as no model id does) and drops any
// replica's older than HELD_INTERVALS intervals; returns Redis's time, the names claimed, each endpoint's last
// reading ("<written at> <JSON>", or false), and every replica's holds kept.
const TURN = luaScript(`
${LUA_NOW_MS}
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], '#held:' .. ARGV[1], now_ms .. ' ' .. ARGV[3]) end
local claimed, readings, holds = {}, {}, {}
for i = 4, #ARGV do
  local name = ARGV[i]
  local claim = redis.call('HGET', KEYS[1], 'claim:' .. name)
  local ends = claim and tonumber(string.match(claim, '^(%d+)')) or 0
  if ends <= now_ms then
    redis.call('HSET', KEYS[1], 'claim:' .. name, (now_ms + tonumber(ARGV[2])) .. ' ' .. ARGV[1])
    claimed[#claimed + 1] = name
  end
  readings[#readings + 1] = redis.call('HGET', KEYS[1], name) or false
end
local cursor = '0'
repeat
  local page = redis.call('HSCAN', KEYS[1], cursor, 'MATCH', '#held:*', 'COUNT', 100)
  cursor = page[1]
  for j = 1, #page[2], 2 do
    local at, held = string.match(page[2][j + 1], '^(%d+) (.*)$')
    if tonumber(at) < now_ms - tonumber(ARGV[2]) * ${HELD_INTERVALS} then redis.call('HDEL', KEYS[1], page[2][j])
    else holds[#holds + 1] = held end
  end
until cursor == '0'
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10)
return { now_ms, claimed, readings, holds }
`);

// KEYS: the fleet's readings. ARGV: the endpoint, its reading (JSON). Written at Redis's time, which every replica ages it by.
const WRITE = luaScript(`
${LUA_NOW_MS}
redis.call('HSET', KEYS[1], ARGV[1], now_ms .. ' ' .. ARGV[2])
return now_ms
`);

const ownCounts = (reason: string): EngineReport => ({ source: 'own-counts', reason, external: 0 });
const REPORTS_NO_LOAD = ownCounts('this kind of upstream reports no load');
const READING_OFF = ownCounts('engine load reading is off (gateway.engineLoad.intervalMs)');
const NOT_READ_YET = ownCounts('not read yet');
const STALE = ownCounts('last reading is stale');

/** What routing takes from a reading, made once per reading: the request path asks for it at every request. */
function reportOf(reading: Reading): EngineReport {
  if ('error' in reading) return ownCounts(`last read failed: ${reading.error}`);
  const { running, waiting, kvCacheUse, external, capacity, runMs } = reading;
  return {
    source: 'engine',
    load: { running, waiting, ...(kvCacheUse === undefined ? {} : { kvCacheUse }) },
    external,
    ...(capacity === undefined ? {} : { capacity }),
    ...(runMs === undefined ? {} : { runMs }),
  };
}

/**
 * How long a request ran at the engine lately: the seconds run by those that finished since the `earlier` reading,
 * over their number; the earlier figure while none finished (or the engine restarted, its counts starting again).
 * The engine's own figure counts every request it ran, whichever replica (or client) sent it: one replica's
 * figure counts only its own (with three replicas on engine-load-routing.mjs's scenario (c), 0.8 s where the
 * neighbour's requests, sent by the other two, ran 4 s).
 */
function runMsSince(earlier: { ran?: EngineLoad['ran']; runMs?: number } | undefined, ran: EngineLoad['ran']): number | undefined {
  if (!ran) return undefined;
  const before = earlier?.ran;
  if (before && ran.requests > before.requests && ran.seconds >= before.seconds) return ((ran.seconds - before.seconds) * 1000) / (ran.requests - before.requests);
  return earlier?.runMs;
}

export class EngineReports {
  private readonly replica = randomUUID();
  private endpoints: RoutedEndpoint[] = [];
  private settings: EngineReadSettings = { intervalMs: 0, timeoutMs: 0 };
  private readonly readings = new Map<string, { at: number; reading: Reading; report: EngineReport }>();
  private timer: NodeJS.Timeout | undefined;
  private reading = false;
  /** Redis's clock less this replica's, where the fleet shares readings (they are aged by Redis's time). */
  private clockOffset = 0;
  /** How long the fleet's requests held a slot at each endpoint lately (ms), where the fleet shares its holds. */
  private readonly fleetHeld = new Map<string, number>();

  /**
   * `fleetLoadAt`: the fleet's requests at an endpoint now, in flight and waiting, to tell the engine's other work
   * from. `takeHolds`: this replica's requests that gave back a slot at an endpoint since the last call, and how long
   * they held it in all.
   */
  constructor(
    private readonly redis: Redis | undefined,
    private readonly fleetLoadAt: (name: string) => number,
    private readonly takeHolds: (name: string) => Holds,
  ) {}

  /** Reads these endpoints from now on, every `settings.intervalMs`. */
  apply(endpoints: RoutedEndpoint[], settings: EngineReadSettings): void {
    this.endpoints = endpoints.filter((e) => e.dialect.engineLoad);
    const names = new Set(this.endpoints.map((e) => e.name));
    for (const name of this.readings.keys()) if (!names.has(name)) this.readings.delete(name);
    for (const name of this.fleetHeld.keys()) if (!names.has(name)) this.fleetHeld.delete(name);
    if (this.timer && this.settings.intervalMs === settings.intervalMs) {
      this.settings = settings;
      return;
    }
    this.settings = settings;
    clearInterval(this.timer);
    this.timer = undefined;
    if (settings.intervalMs === 0) return this.readings.clear();
    this.timer = setInterval(() => void this.turn(), settings.intervalMs);
    this.timer.unref();
    void this.turn();
  }

  /** What routing goes by for `endpoint`. */
  report(endpoint: RoutedEndpoint): EngineReport {
    if (!endpoint.dialect.engineLoad) return REPORTS_NO_LOAD;
    if (this.settings.intervalMs === 0) return READING_OFF;
    const last = this.readings.get(endpoint.name);
    if (!last) return NOT_READ_YET;
    const fresh = this.now() - last.at <= STALE_INTERVALS * this.settings.intervalMs + this.settings.timeoutMs;
    return fresh || 'error' in last.reading ? last.report : STALE;
  }

  /**
   * How long the fleet's requests held a slot at `endpoint` lately (ms): every replica's, over the last
   * HELD_INTERVALS intervals, the last figure kept while none ended; undefined without Redis (a replica then goes
   * by its own, which counts only its own requests: see runMsSince).
   */
  heldMs(endpoint: RoutedEndpoint): number | undefined {
    return this.fleetHeld.get(endpoint.name);
  }

  /** How old the last reading of `endpoint` (good or failed) is, for operators; undefined where there is none. */
  ageMs(endpoint: RoutedEndpoint): number | undefined {
    const last = this.readings.get(endpoint.name);
    return last && Math.max(0, this.now() - last.at);
  }

  private keep(name: string, at: number, reading: Reading): void {
    this.readings.set(name, { at, reading, report: reportOf(reading) });
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private now(): number {
    return Date.now() + this.clockOffset;
  }

  /** One interval: claim and read this replica's share of the engines, and take the fleet's readings of the rest. */
  private async turn(): Promise<void> {
    if (this.reading || this.endpoints.length === 0) return;
    this.reading = true;
    try {
      const endpoints = this.endpoints;
      const { redis } = this;
      // Taken with or without Redis, so that none pile up while it is away.
      const holds: Record<string, [requests: number, ms: number]> = {};
      for (const e of endpoints) {
        const { requests, ms } = this.takeHolds(e.name);
        if (requests > 0) holds[e.name] = [requests, ms];
      }
      if (!redis) {
        await Promise.all(endpoints.map(async (e) => this.keep(e.name, Date.now(), await this.read(e, this.readings.get(e.name)?.reading))));
        return;
      }
      const sentHolds = Object.keys(holds).length > 0 ? JSON.stringify(holds) : '';
      const [now, claimed, stored, fleetHolds] = (await TURN.run(redis, [redisKeys.engineLoads], [this.replica, this.settings.intervalMs, sentHolds, ...endpoints.map((e) => e.name)])) as [number, string[], (string | null)[], string[]];
      this.clockOffset = Number(now) - Date.now();
      this.takeFleetHolds(fleetHolds);
      endpoints.forEach((e, i) => {
        const text = stored[i];
        if (!text) return;
        const space = text.indexOf(' ');
        this.keep(e.name, Number(text.slice(0, space)), JSON.parse(text.slice(space + 1)) as Reading);
      });
      const mine = endpoints.filter((e) => claimed.includes(e.name));
      await Promise.all(
        mine.map(async (e) => {
          const reading = await this.read(e, this.readings.get(e.name)?.reading);
          const at = Number(await WRITE.run(redis, [redisKeys.engineLoads], [e.name, JSON.stringify(reading)]));
          this.keep(e.name, at, reading);
        }),
      );
    } catch {
      // Redis is away: the readings age until they are stale, and routing goes by its own counts.
    } finally {
      this.reading = false;
    }
  }

  /** The fleet's figure per endpoint from every replica's holds kept in Redis; the last figure where none ended. */
  private takeFleetHolds(fleetHolds: string[]): void {
    const totals = new Map<string, Holds>();
    for (const text of fleetHolds) {
      for (const [name, [requests, ms]] of Object.entries(JSON.parse(text) as Record<string, [number, number]>)) {
        const total = totals.get(name) ?? { requests: 0, ms: 0 };
        totals.set(name, { requests: total.requests + requests, ms: total.ms + ms });
      }
    }
    for (const e of this.endpoints) {
      const total = totals.get(e.name);
      if (total && total.requests > 0) this.fleetHeld.set(e.name, total.ms / total.requests);
    }
  }

  /** Reads one engine's load (`last`: the fleet's reading before) and what it says beyond the fleet's counts; never throws. */
  private async read(endpoint: RoutedEndpoint, last: Reading | undefined): Promise<Reading> {
    const load = await upstreamEngineLoad(endpoint, this.settings.timeoutMs);
    if ('error' in load) return load;
    // The fleet's count is this replica's now and the others' of up to FLEET_LOAD_INTERVAL_MS ago, so requests
    // they have just sent look like work from elsewhere: a steady few, more as the fleet sends more. Only what
    // is past that lag (EXTERNAL_MARGIN), in two readings in a row, counts (with three replicas on
    // engine-load-routing.mjs's scenario (b), one reading alone put the KV use of its four engines at 0.22 to
    // 0.59, against 0.43 to 0.44 going by Parley's counts alone).
    const fleet = this.fleetLoadAt(endpoint.name);
    const seen = Math.max(0, Math.floor(load.running + load.waiting - fleet - EXTERNAL_MARGIN.requests - EXTERNAL_MARGIN.share * fleet));
    const earlier = last && 'seen' in last ? last : undefined;
    // An engine queues only when it runs all it can (its sequences, or what its KV cache holds): that is its
    // capacity, the most seen, and more where it runs more. Forgotten CAPACITY_READINGS readings after its last
    // queue, so that a capacity seen while long prompts filled the KV cache does not keep work away for good.
    const sinceQueue = load.waiting > 0 ? 0 : (earlier?.sinceQueue ?? CAPACITY_READINGS) + 1;
    const kept = earlier && earlier.sinceQueue < CAPACITY_READINGS ? earlier.capacity : undefined;
    const capacity = load.waiting > 0 || kept !== undefined ? Math.max(load.running, kept ?? 0) : undefined;
    const runMs = runMsSince(earlier, load.ran);
    return {
      ...load,
      seen,
      external: Math.min(seen, earlier?.seen ?? seen),
      sinceQueue,
      ...(capacity === undefined ? {} : { capacity }),
      ...(runMs === undefined ? {} : { runMs }),
    };
  }
}
