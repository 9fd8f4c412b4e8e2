// Accounts (client teams) and their members. An account is created with its
// first member; the email is the member's login and is unique.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { luaScript } from '../redis/lua-script.js';
import { hashPassword } from './passwords.js';

// One script, so that two sign-ups with one email cannot both win and no half-made account is left.
// Claims a member's email for an account. KEYS: the member. ARGV: account
// id, created, password hash ('' for none). 0 when the email is taken.
const CLAIM_MEMBER = luaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
redis.call('HSET', KEYS[1], 'account', ARGV[1], 'created', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'password', ARGV[3]) end
return {1}
`);

export interface Account {
  id: string;
  email: string;
  name: string;
  created: number;
  /** Per-account rate limits; absent means the configured defaults. */
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  concurrentRequests?: number;
}

export class EmailTaken extends Error {}

const EMAIL_FORMAT = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
export const isEmail = (email: string) => EMAIL_FORMAT.test(email) && email.length <= 254;

function toAccount(id: string, h: Record<string, string>): Account {
  return {
    id,
    email: h.email,
    name: h.name,
    created: Number(h.created),
    ...(h.rpm ? { requestsPerMinute: Number(h.rpm) } : {}),
    ...(h.tpm ? { tokensPerMinute: Number(h.tpm) } : {}),
    ...(h.conc ? { concurrentRequests: Number(h.conc) } : {}),
  };
}

/** Creates an account with its first member (a password is optional: an operator may create it for a team to claim). */
export async function createAccount(redis: Redis, opts: { email: string; name?: string; password?: string }): Promise<Account> {
  const email = opts.email.toLowerCase();
  if (!isEmail(email)) throw new Error(`"${opts.email}" is not an email address`);
  const id = `acct_${randomBytes(8).toString('hex')}`;
  const created = Date.now();
  const password = opts.password ? await hashPassword(opts.password) : '';
  const name = opts.name ?? email.split('@')[0];
  // The account, its place in the list, then its member, each a key of its own (slots apart on a
  // cluster): the email is claimed last, so an account whose email was taken is taken back whole.
  await redis.hset(redisKeys.account(id), { email, name, created, granted: 0, topped_up: 0, held: 0 });
  await redis.zadd(redisKeys.accounts, created, id);
  const [claimed] = (await CLAIM_MEMBER.run(redis, [redisKeys.member(email)], [id, created, password])) as number[];
  if (!claimed) {
    await redis.zrem(redisKeys.accounts, id);
    await redis.del(redisKeys.account(id));
    throw new EmailTaken(`an account for ${email} already exists`);
  }
  await redis.sadd(redisKeys.accountMembers(id), email);
  return { id, email, name, created };
}

/** Adds a member who logs in to the platform with their email (and a password, or one they set by signing up). */
export async function addMember(redis: Redis, account: string, opts: { email: string; password?: string }): Promise<void> {
  const email = opts.email.toLowerCase();
  if (!isEmail(email)) throw new Error(`"${opts.email}" is not an email address`);
  const password = opts.password ? await hashPassword(opts.password) : '';
  const [claimed] = (await CLAIM_MEMBER.run(redis, [redisKeys.member(email)], [account, Date.now(), password])) as number[];
  if (!claimed) throw new EmailTaken(`${email} is already a member of an account`);
  await redis.sadd(redisKeys.accountMembers(account), email);
}

/** The emails of an account's members: those added, and the one it was made with. */
export async function listMembers(redis: Redis, account: Account): Promise<string[]> {
  const added = await redis.smembers(redisKeys.accountMembers(account.id));
  return [...new Set([account.email, ...added])].sort();
}

export async function getAccount(redis: Redis, id: string): Promise<Account | undefined> {
  const h = await redis.hgetall(redisKeys.account(id));
  return h.email ? toAccount(id, h) : undefined;
}

export async function findAccountByEmail(redis: Redis, email: string): Promise<Account | undefined> {
  const id = await redis.hget(redisKeys.member(email), 'account');
  return id ? getAccount(redis, id) : undefined;
}

/** An account by its id or by a member's email, as operators type either. */
export async function resolveAccount(redis: Redis, idOrEmail: string): Promise<Account | undefined> {
  return idOrEmail.includes('@') ? findAccountByEmail(redis, idOrEmail) : getAccount(redis, idOrEmail);
}

export async function listAccounts(redis: Redis): Promise<Account[]> {
  const ids = await redis.zrange(redisKeys.accounts, 0, -1);
  const accounts = await Promise.all(ids.map((id) => getAccount(redis, id)));
  return accounts.filter((a): a is Account => a !== undefined);
}

/** Sets (or, with null, clears) an account's own rate limits; one left out (undefined) stays as it is. */
export async function setAccountLimits(redis: Redis, id: string, limits: { requestsPerMinute: number | null; tokensPerMinute: number | null; concurrentRequests?: number | null }): Promise<void> {
  const key = redisKeys.account(id);
  for (const [field, value] of [['rpm', limits.requestsPerMinute], ['tpm', limits.tokensPerMinute], ['conc', limits.concurrentRequests]] as const) {
    if (value === null) await redis.hdel(key, field);
    else if (value !== undefined) await redis.hset(key, field, value);
  }
}
