// The account a fresh quickstart comes with, so that the first request can
// be made at once and the platform seen without a second account. Made once
// per Redis; its key and its member's password are returned that one time.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { changeCredit } from '../billing/credit-ledger.js';
import { redisKeys } from '../redis/keys.js';
import { createAccount, findAccountByEmail } from '../accounts/accounts.js';
import { createApiKey } from '../accounts/api-keys.js';

export const DEMO_EMAIL = 'demo@parley.local';

/** The demo account's API key and its platform password (none where the account was there before), shown once. */
export interface DemoAccount {
  key: string;
  password: string | undefined;
}

export async function ensureDemoAccount(redis: Redis, secret: string, creditMicros: number): Promise<DemoAccount | undefined> {
  if (!(await redis.set(redisKeys.demoAccount, String(Date.now()), 'NX'))) return undefined;
  const password = randomBytes(12).toString('base64url');
  const existing = await findAccountByEmail(redis, DEMO_EMAIL);
  const account = existing ?? (await createAccount(redis, { email: DEMO_EMAIL, name: 'Demo', password }));
  await changeCredit(redis, account.id, 'grant', creditMicros, 'demo account credit');
  const { key } = await createApiKey(redis, secret, account.id, 'demo');
  return { key, password: existing ? undefined : password };
}
