// Redis's own time for the two scripts of a light-load request, the credit
// hold and its settlement, called one at a time (as at one connection) on a
// Redis set up as `parley serve`'s private one. For each: Redis's time in
// the script call (INFO commandstats, evalsha) against its time in the
// commands the script runs, and how many it runs. The difference is the
// scripts' own cost: running the script, and Redis's work around each call
// from Lua. A hold is on every request's way; a settlement is not, but it
// takes its share of a small machine's CPU.
//
//   npm run build && node bench/ledger-scripts.mjs [calls, default 3000]
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './support.mjs';

const CALLS = Number(process.argv[2] ?? 3000);
const dist = (path) => import(join(ROOT, 'dist', path));

const { startPrivateRedis } = await dist('redis/private-server.js');
const { connectRedis } = await dist('redis/connection.js');
const { createAccount } = await dist('accounts/accounts.js');
const { changeCredit, holdCredits, settleHolds } = await dist('billing/credit-ledger.js');
const { rateCheck } = await dist('ratelimit/rate-limiter.js');

const server = await startPrivateRedis(mkdtempSync(join(tmpdir(), 'parley-ledger-')));
const redis = await connectRedis(server.target, 'bench');
try {
  const { id: account } = await createAccount(redis, { email: 'bench@example.com' });
  await changeCredit(redis, account, 'grant', 1e15, 'bench');
  const prices = { missPico: 1_000_000, hitPico: 100_000, outputPico: 2_000_000 };
  const hold = (id) =>
    holdCredits(redis, [{
      hold: { account, requestId: id, ttlMs: 120_000, prices, promptTokens: 30, n: 1, maxReplyTokens: 256 },
      rate: rateCheck(account, { requestsPerMinute: 1e8, tokensPerMinute: 2e9 }, 286),
    }]);
  const settle = (id) =>
    settleHolds(redis, [{
      account, keyId: 'key', requestId: id, clientIds: { requestId: id, replyId: `chatcmpl-${id}` }, model: 'bench', endpoint: 'bench',
      outcome: 'complete', usage: { prompt_tokens: 30, completion_tokens: 256, cached_tokens: 0 }, cost: 543, api: 'chat', tier: 'default',
    }]);

  /** Redis's time in script calls and in the commands they ran, per call, while `work` runs. */
  const measure = async (work) => {
    await redis.config('RESETSTAT');
    await work();
    let script = 0, commands = 0, count = 0;
    for (const [, name, calls, usec] of (await redis.info('commandstats')).matchAll(/cmdstat_(\w+):calls=(\d+),usec=(\d+)/g)) {
      if (name === 'evalsha') script += Number(usec);
      else if (name !== 'config') {
        commands += Number(usec);
        count += Number(calls);
      }
    }
    return { script: script / CALLS, commands: commands / CALLS, count: count / CALLS };
  };

  const ids = Array.from({ length: CALLS }, (_, i) => `bench-${i}`);
  // Warm-up: the scripts loaded, the account's keys made.
  for (const id of ids.slice(0, 500)) await hold(`warm-${id}`).then(() => settle(`warm-${id}`));
  const holds = await measure(async () => { for (const id of ids) await hold(id); });
  const settlements = await measure(async () => { for (const id of ids) await settle(id); });
  console.log(`${CALLS} calls each, one at a time; Redis's µs per call:`);
  for (const [name, m] of [['hold', holds], ['settlement', settlements]]) {
    console.log(`${name}: script ${m.script.toFixed(1)} µs, of which its ${m.count.toFixed(1)} commands ${m.commands.toFixed(1)} µs, the rest ${(m.script - m.commands).toFixed(1)} µs`);
  }
} finally {
  redis.disconnect();
  await server.stop();
}
