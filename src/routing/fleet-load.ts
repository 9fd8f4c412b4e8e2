// The fleet's requests at each endpoint, so that prefix affinity spills
// when the fleet overloads a home, not when one replica's share of the load
// does (three replicas each seeing a third of the requests in flight would
// otherwise never spill, and one upstream would queue everything). Every
// FLEET_LOAD_INTERVAL_MS each replica writes its own in-flight and waiting
// counts to one Redis hash and reads the others'; the request path adds the
// others' last counts to its own live ones and never waits on Redis. While
// Redis is away a replica goes by its own counts, as a lone replica would.
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { LUA_INT, LUA_NOW_MS, luaScript } from '../redis/lua-script.js';
import { redisKeys } from '../redis/keys.js';

export const FLEET_LOAD_INTERVAL_MS = 100;
/** A replica that has not written for this long is gone (crashed, or cut off), and its counts with it. */
const GONE_AFTER_MS = 2_000;

// KEYS: the fleet's hash. ARGV: this replica, its counts (JSON), gone-after ms. Writes this replica's counts at
// Redis's own time (the replicas' clocks may disagree), drops replicas gone quiet, returns the others' counts.
const EXCHANGE = luaScript(`
${LUA_INT}
${LUA_NOW_MS}
local now = now_ms
redis.call('HSET', KEYS[1], ARGV[1], int(now) .. ' ' .. ARGV[2])
local others = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local at, counts = string.match(all[i + 1], '^(%d+) (.*)$')
  if tonumber(at) < now - tonumber(ARGV[3]) then redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= ARGV[1] then others[#others + 1] = counts end
end
redis.call('PEXPIRE', KEYS[1], ARGV[3] * 10)
return others
`);

export class FleetLoad {
  private others = new Map<string, number>();
  private readonly replica = randomUUID();
  private readonly timer: NodeJS.Timeout;
  private exchanging = false;

  /** `ownLoads`: this replica's requests in flight and waiting, by endpoint name. */
  constructor(private readonly redis: Redis, private readonly ownLoads: () => Iterable<[string, number]>) {
    this.timer = setInterval(() => void this.exchange(), FLEET_LOAD_INTERVAL_MS);
    this.timer.unref();
  }

  /** The other replicas' requests at `endpoint`, as they last wrote them. */
  othersAt(endpoint: string): number {
    return this.others.get(endpoint) ?? 0;
  }

  close(): void {
    clearInterval(this.timer);
    void this.redis.hdel(redisKeys.fleetLoad, this.replica).catch(() => undefined);
  }

  private async exchange(): Promise<void> {
    if (this.exchanging) return;
    this.exchanging = true;
    try {
      const own = Object.fromEntries([...this.ownLoads()].filter(([, load]) => load > 0));
      const written = (await EXCHANGE.run(this.redis, [redisKeys.fleetLoad], [this.replica, JSON.stringify(own), GONE_AFTER_MS])) as string[];
      const others = new Map<string, number>();
      for (const counts of written) {
        for (const [endpoint, load] of Object.entries(JSON.parse(counts) as Record<string, number>)) others.set(endpoint, (others.get(endpoint) ?? 0) + load);
      }
      this.others = others;
    } catch {
      // Redis is away: go by this replica's own counts until it is back.
      this.others = new Map();
    } finally {
      this.exchanging = false;
    }
  }
}
