// What admitting and settling a request costs Redis: the hold script and the
// settle script, run back to back for batches of 1 (a lightly loaded
// replica, one request per turn of its event loop), 8 and 64 (a busy one),
// against a private redis-server started as `parley serve` starts it
// (unix socket, append-only file). Per request: the scripts' own time
// (INFO commandstats, the commands they call included), the server
// process's CPU from /proc (its I/O and append-only writes too), and the
// memory each request leaves in Redis (INFO memory: its usage event, kept
// for the retention the routing file sets). Redis runs
// on one core, so 1e6 / (CPU µs per request) is about how many requests per
// second one Redis can admit, whatever the number of replicas.
//
//   npm run build && node bench/redis-script-cost.mjs [requests per batch size, default 20000]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAccount } from '../dist/accounts/accounts.js';
import { changeCredit, holdCredits, settleHolds } from '../dist/billing/credit-ledger.js';
import { randomId } from '../dist/gateway/random-ids.js';
import { tokenPrices } from '../dist/billing/prices.js';
import { rateCheck } from '../dist/ratelimit/rate-limiter.js';
import { connectRedis } from '../dist/redis/connection.js';
import { startPrivateRedis } from '../dist/redis/private-server.js';

const REQUESTS = Number(process.argv[2] ?? 20_000);
const BATCH_SIZES = [1, 8, 64];
const CLOCK_TICKS_PER_SECOND = 100;
const prices = tokenPrices({ inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 });
const limits = { requestsPerMinute: 100_000_000, tokensPerMinute: 2_000_000_000 };
const usage = { prompt_tokens: 24, completion_tokens: 256, cached_tokens: 16 };

/** User + system CPU microseconds of a process so far. */
function cpuMicros(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / CLOCK_TICKS_PER_SECOND;
}

/** Bytes the server holds, by INFO memory. */
async function usedMemory(redis) {
  return Number(/used_memory:(\d+)/.exec(await redis.info('memory'))[1]);
}

/** Microseconds the server spent in EVALSHA so far, by INFO commandstats. */
async function scriptMicros(redis) {
  const m = /cmdstat_evalsha:calls=\d+,usec=(\d+)/.exec(await redis.info('commandstats'));
  return m ? Number(m[1]) : 0;
}

const dataDir = mkdtempSync(join(tmpdir(), 'parley-bench-'));
const server = await startPrivateRedis(dataDir);
const redis = await connectRedis(server.target, 'bench');
try {
  const pid = Number(/process_id:(\d+)/.exec(await redis.info('server'))[1]);
  const account = (await createAccount(redis, { email: 'bench@parley.local' })).id;
  await changeCredit(redis, account, 'grant', Number.MAX_SAFE_INTEGER / 4, 'bench');
  /** One batch admitted (credit hold with the key's rate check), then settled as complete. */
  const admitAndSettle = async (size) => {
    // Ids as the gateway makes them: their length is part of what a request leaves in Redis.
    const ids = Array.from({ length: size }, () => randomId());
    await holdCredits(redis, ids.map((requestId) => ({
      hold: { account, requestId, ttlMs: 120_000, prices, promptTokens: 40, n: 1, maxReplyTokens: 256 },
      rate: rateCheck('bench-key', limits, 40 + 256),
    })));
    await settleHolds(redis, ids.map((requestId) => ({
      account, keyId: 'bench-key', requestId, model: 'bench', endpoint: 'bench', outcome: 'complete', usage, cost: 600,
    })));
  };
  const rows = [];
  for (const size of BATCH_SIZES) {
    const batches = Math.ceil(REQUESTS / size);
    for (let i = 0; i < Math.min(batches, 200); i++) await admitAndSettle(size);
    const before = { script: await scriptMicros(redis), cpu: cpuMicros(pid), memory: await usedMemory(redis) };
    for (let i = 0; i < batches; i++) await admitAndSettle(size);
    const requests = batches * size;
    const cpu = (cpuMicros(pid) - before.cpu) / requests;
    rows.push({
      'requests per batch': size,
      'script µs/request': Number(((await scriptMicros(redis) - before.script) / requests).toFixed(1)),
      'redis-server CPU µs/request': Math.round(cpu),
      'requests/s one Redis core admits': Math.round(1_000_000 / cpu),
      'memory left bytes/request': Math.round((await usedMemory(redis) - before.memory) / requests),
    });
  }
  console.table(rows);
} finally {
  redis.disconnect();
  await server.stop();
  rmSync(dataDir, { recursive: true, force: true });
}
