// Credit codes an operator issues (`parley credit-codes create`) and a team
// redeems on the platform's top-up page. A code is stored only as a hash;
// redeeming it is one script, so it credits exactly once.
import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { LUA_INT, luaScript } from '../redis/lua-script.js';

const ALPHABET = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789'; // no 0/O or 1/I to misread
const hashCode = (code: string) => createHash('sha256').update(code.trim().toUpperCase()).digest('hex');

// KEYS: code, account, ledger. ARGV: account id, time.
const REDEEM = luaScript(`
${LUA_INT}
local amount = redis.call('HGET', KEYS[1], 'amount')
if not amount then return {-1, 0} end
if redis.call('HEXISTS', KEYS[1], 'redeemed_by') == 1 then return {-2, 0} end
if redis.call('EXISTS', KEYS[2]) == 0 then return {-3, 0} end
redis.call('HSET', KEYS[1], 'redeemed_by', ARGV[1], 'redeemed_at', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'topped_up', int(tonumber(amount)))
redis.call('XADD', KEYS[3], '*', 'account', ARGV[1], 'kind', 'top_up', 'amount', amount, 'note', 'credit code')
return {1, tonumber(amount)}
`);

export async function createCreditCode(redis: Redis, amountMicros: number): Promise<string> {
  const bytes = randomBytes(16);
  const chars = Array.from(bytes, (b) => ALPHABET[b % ALPHABET.length]).join('');
  const code = `PARLEY-${chars.slice(0, 4)}-${chars.slice(4, 8)}-${chars.slice(8, 12)}-${chars.slice(12, 16)}`;
  await redis.hset(redisKeys.creditCode(hashCode(code)), { amount: amountMicros, created: Date.now() });
  return code;
}

export type RedeemResult = { kind: 'credited'; amount: number } | { kind: 'unknown' } | { kind: 'already_redeemed' };

export async function redeemCreditCode(redis: Redis, account: string, code: string): Promise<RedeemResult> {
  const [status, amount] = (await REDEEM.run(redis, [redisKeys.creditCode(hashCode(code)), redisKeys.account(account), redisKeys.ledger], [account, Date.now()])) as number[];
  if (status === 1) return { kind: 'credited', amount };
  return status === -2 ? { kind: 'already_redeemed' } : { kind: 'unknown' };
}
