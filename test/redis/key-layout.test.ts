// `parley migrate`: data written in the first key layout (every key of an
// account under parley:account:ID, one ledger for all) moves to the
// cluster-ready one, exactly, once; a second run changes nothing, a run cut
// short is finished by the next, and nothing starts on the old layout.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { redeemCreditCode } from '../../src/billing/credit-codes.js';
import { redisKeys } from '../../src/redis/keys.js';
import { runParley, runParleyFailing } from '../support/parley-process.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';
import { TEST_KEY_SECRET } from '../support/gateway.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis?.stop());

const ID = 'acct_0123456789abcdef';
const CODE = 'PARLEY-AAAA-BBBB-CCCC-DDDD';

/** What an earlier Parley wrote for one account: its balance, an open hold, a day's totals, usage events, keys, ledger entries and a redeemed code. */
async function writeOldLayout(): Promise<void> {
  const c = redis.client;
  await c.hset(`parley:account:${ID}`, { email: 'old@example.com', name: 'old', created: 1, granted: 4_000_000, topped_up: 1_000_000, held: 300 });
  await c.zadd('parley:accounts', 1, ID);
  await c.hset(`parley:member:old@example.com`, { account: ID, created: 1 });
  await c.zadd(`parley:account:${ID}:holds`, Date.now() + 60_000, 'req-open');
  await c.hset(`parley:account:${ID}:hold-amounts`, 'req-open', 300);
  await c.hset(`parley:account:${ID}:usage:2026-11-24`, 'm\trequests', 2);
  await c.expire(`parley:account:${ID}:usage:2026-11-24`, 3600);
  await c.xadd(`parley:account:${ID}:usage-events`, '1000-0', 'request_id', 'r1');
  await c.zadd(`parley:account:${ID}:keys`, 1, 'key_1');
  await c.xadd('parley:ledger', '500-0', 'account', ID, 'kind', 'grant', 'amount', 4_000_000, 'note', 'initial');
  await c.xadd('parley:ledger', '600-0', 'account', 'acct_other', 'kind', 'grant', 'amount', 1, 'note', 'x');
  await c.hset(`parley:credit-code:${createHash('sha256').update(CODE).digest('hex')}`, { amount: 1_000_000, created: 1, redeemed_by: ID, redeemed_at: 2 });
}

describe('parley migrate', () => {
  it('moves an earlier layout to the current one exactly, refuses to serve before, and changes nothing when run again', async () => {
    await writeOldLayout();
    const env = { REDIS_URL: redis.url, PARLEY_KEY_SECRET: TEST_KEY_SECRET };
    const dir = mkdtempSync(join(tmpdir(), 'parley-migrate-'));
    const refused = await runParleyFailing(['accounts', 'list', '--data-dir', dir], env);
    expect(refused.stderr).toContain('run "parley migrate"');

    // A run cut short after one key was restored but before its old copy went: the next run finishes it.
    await redis.client.restore(redisKeys.holds(ID), 0, (await redis.client.dumpBuffer(`parley:account:${ID}:holds`))!);
    expect(await runParley(['migrate', '--data-dir', dir], env)).toContain('migrated: 6 account keys, 2 ledger entries, 1 redeemed codes');
    expect(await redis.client.keys('parley:account:*')).toEqual([]);
    expect(await redis.client.exists('parley:ledger')).toBe(0);

    expect(await readBalance(redis.client, ID)).toEqual({ granted: 4_000_000, toppedUp: 1_000_000, held: 300 });
    expect(await redis.client.zscore(redisKeys.holds(ID), 'req-open')).not.toBeNull();
    expect(await redis.client.hget(redisKeys.dailyUsage(ID, '2026-11-24'), 'm\trequests')).toBe('2');
    expect(await redis.client.ttl(redisKeys.dailyUsage(ID, '2026-11-24'))).toBeGreaterThan(3000);
    expect(await redis.client.xrange(redisKeys.usageEvents(ID), '-', '+')).toEqual([['1000-0', ['request_id', 'r1']]]);
    expect(await redis.client.xrange(redisKeys.ledger(ID), '-', '+')).toEqual([['500-0', ['account', ID, 'kind', 'grant', 'amount', '4000000', 'note', 'initial']]]);
    expect(await redis.client.xlen(redisKeys.ledger('acct_other'))).toBe(1);
    // The code redeemed under the old layout credits nothing again.
    expect(await redeemCreditCode(redis.client, ID, CODE)).toEqual({ kind: 'already_redeemed' });
    expect((await readBalance(redis.client, ID))!.toppedUp).toBe(1_000_000);

    const snapshot = async () => Object.fromEntries(await Promise.all((await redis.client.keys('parley:*')).sort().map(async (k) => [k, await redis.client.dump(k)])));
    const before = await snapshot();
    expect(await runParley(['migrate', '--data-dir', dir], env)).toContain('migrated: 0 account keys, 0 ledger entries, 1 redeemed codes');
    expect(await snapshot()).toEqual(before);
    expect(await runParley(['accounts', 'list', '--data-dir', dir], env)).toContain(ID);
  });
});
