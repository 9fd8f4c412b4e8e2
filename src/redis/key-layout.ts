// Which key layout a Redis holds, and the move from the first (every key of
// an account under `parley:account:ID`, one ledger for all) to the
// cluster-ready one of keys.ts (each account's keys under its hash tag).
// `parley migrate` runs the move; it is idempotent, and a run cut short is
// finished by running it again. Gateways and operator commands refuse a
// Redis still in the old layout rather than write a mix of both.
import type { Cluster } from 'ioredis';
import { ConfigError } from '../config-error.js';
import type { Redis } from './connection.js';
import { isCluster } from './shared-redis.js';
import { accountTag, redisKeys } from './keys.js';

const LAYOUT = '2';
const OLD_ACCOUNT_KEY = /^parley:account:([^:{}]+)(?::(.+))?$/;
const OLD_LEDGER = 'parley:ledger';

/** Marks a new Redis with the current layout; refuses one that holds data in the old one. */
export async function checkKeyLayout(redis: Redis): Promise<void> {
  const version = await redis.get(redisKeys.layoutVersion);
  if (version === LAYOUT) return;
  // Unmarked: a new Redis, or accounts made by this version's code alone (its first account says which), or the old layout.
  const [first] = version === null ? await redis.zrange(redisKeys.accounts, 0, 0) : [];
  if (version === null && (first === undefined || (await redis.exists(redisKeys.account(first))))) {
    await redis.set(redisKeys.layoutVersion, LAYOUT, 'NX');
    return;
  }
  throw new ConfigError('this Redis holds Parley data in an earlier key layout: run "parley migrate" once, with the same REDIS_* settings, then start again');
}

/** Each primary's keys that match: on a cluster, every primary is scanned. */
async function* scan(redis: Redis, match: string): AsyncGenerator<string> {
  const nodes = isCluster(redis) ? (redis as unknown as Cluster).nodes('master') : [redis];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', match, 'COUNT', 1000);
      cursor = next;
      yield* keys;
    } while (cursor !== '0');
  }
}

/** Moves a key to a new name (in any slot): DUMP, RESTORE with its time to live, DEL. Where a cut-short run restored it already, only the old one goes. */
async function moveKey(redis: Redis, from: string, to: string): Promise<void> {
  if (!(await redis.exists(to))) {
    const dump = await redis.dumpBuffer(from);
    if (dump === null) return;
    const ttl = await redis.pttl(from);
    await redis.restore(to, ttl > 0 ? ttl : 0, dump);
  }
  await redis.del(from);
}

export interface MigrationReport {
  movedKeys: number;
  ledgerEntries: number;
  redeemedCodes: number;
}

/** Moves data in the old layout to the current one; safe to run again, and on a Redis already moved changes nothing. */
export async function migrateKeyLayout(redis: Redis): Promise<MigrationReport> {
  const report: MigrationReport = { movedKeys: 0, ledgerEntries: 0, redeemedCodes: 0 };
  for await (const key of scan(redis, 'parley:account:*')) {
    const m = OLD_ACCOUNT_KEY.exec(key);
    if (!m) continue;
    await moveKey(redis, key, accountTag(m[1]) + (m[2] ?? 'account'));
    report.movedKeys++;
  }
  // The one ledger becomes each account's own, entry ids kept; entries an earlier run copied are skipped.
  for (let start = '-'; ; ) {
    const page = (await redis.xrange(OLD_LEDGER, start, '+', 'COUNT', 1000)) as [string, string[]][];
    for (const [id, fields] of page) {
      const account = fields[fields.indexOf('account') + 1];
      const target = redisKeys.ledger(account);
      const [last] = (await redis.xrevrange(target, '+', '-', 'COUNT', 1)) as [string, string[]][];
      if (!last || streamIdAfter(id, last[0])) await redis.xadd(target, id, ...fields);
      report.ledgerEntries++;
    }
    if (page.length < 1000) break;
    start = `(${page[page.length - 1][0]}`;
  }
  await redis.del(OLD_LEDGER);
  // A code redeemed before is marked applied in its account, so that redeeming it again credits nothing.
  for await (const key of scan(redis, 'parley:credit-code:*')) {
    const account = await redis.hget(key, 'redeemed_by');
    if (!account) continue;
    await redis.hsetnx(redisKeys.appliedChanges(account), `code:${key.slice('parley:credit-code:'.length)}`, '0');
    report.redeemedCodes++;
  }
  await redis.set(redisKeys.layoutVersion, LAYOUT);
  return report;
}

function streamIdAfter(a: string, b: string): boolean {
  const [am, as] = a.split('-').map(BigInt);
  const [bm, bs] = b.split('-').map(BigInt);
  return am > bm || (am === bm && as > bs);
}
