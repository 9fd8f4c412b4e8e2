// Credit codes an operator issues (`parley credit-codes create`) and a team
// redeems on the platform's top-up page. A code is stored only as a hash,
// and credits exactly once.
import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { luaScript } from '../redis/lua-script.js';
import { changeCredit } from './credit-ledger.js';

const ALPHABET = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789'; // no 0/O or 1/I to misread
const hashCode = (code: string) => createHash('sha256').update(code.trim().toUpperCase()).digest('hex');

// Claims a code for an account. KEYS: the code. ARGV: account id, time.
// Answers the amount, -1 for no such code, -2 for a code another account
// redeemed. The same account's claim again answers the amount again: the
// credit itself is applied once (changeCredit with the code as its change
// id), in the account's own slot, so a redemption cut short between the
// two steps is completed by trying again.
const CLAIM = luaScript(`
local amount = redis.call('HGET', KEYS[1], 'amount')
if not amount then return {-1} end
local by = redis.call('HGET', KEYS[1], 'redeemed_by')
if by and by ~= ARGV[1] then return {-2} end
if not by then redis.call('HSET', KEYS[1], 'redeemed_by', ARGV[1], 'redeemed_at', ARGV[2]) end
return {tonumber(amount)}
`);

export async function createCreditCode(redis: Redis, amountMicros: number): Promise<string> {
  const bytes = randomBytes(16);
  const chars = Array.from(bytes, (b) => ALPHABET[b % ALPHABET.length]).join('');
  const code = `PARLEY-${chars.slice(0, 4)}-${chars.slice(4, 8)}-${chars.slice(8, 12)}-${chars.slice(12, 16)}`;
  await redis.hset(redisKeys.creditCode(hashCode(code)), { amount: amountMicros, created: Date.now() });
  return code;
}

/** `balance_full`: the code is this account's, and credits it once its balance has room (see MAX_BALANCE_MICROS). */
export type RedeemResult = { kind: 'credited'; amount: number } | { kind: 'unknown' } | { kind: 'already_redeemed' } | { kind: 'balance_full' };

export async function redeemCreditCode(redis: Redis, account: string, code: string): Promise<RedeemResult> {
  const hash = hashCode(code);
  // A code is never spent on an account that does not exist.
  if (!(await redis.exists(redisKeys.account(account)))) return { kind: 'unknown' };
  const [amount] = (await CLAIM.run(redis, [redisKeys.creditCode(hash)], [account, Date.now()])) as number[];
  if (amount === -1) return { kind: 'unknown' };
  if (amount === -2) return { kind: 'already_redeemed' };
  const applied = await changeCredit(redis, account, 'top_up', amount, 'credit code', `code:${hash}`);
  if (applied.kind === 'applied') return { kind: 'credited', amount };
  if (applied.kind === 'over_maximum') return { kind: 'balance_full' };
  return applied.kind === 'applied_before' ? { kind: 'already_redeemed' } : { kind: 'unknown' };
}
