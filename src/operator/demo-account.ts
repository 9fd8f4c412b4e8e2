// The account a fresh quickstart comes with, so that the first request can
// be made at once. Made once per Redis; its key is returned that one time.
import type { Redis } from 'ioredis';
import { changeCredit } from '../billing/credit-ledger.js';
import { redisKeys } from '../redis/keys.js';
import { createAccount, findAccountByEmail } from '../accounts/accounts.js';
import { createApiKey } from '../accounts/api-keys.js';

export const DEMO_EMAIL = 'demo@parley.local';

export async function ensureDemoAccount(redis: Redis, secret: string, creditMicros: number): Promise<string | undefined> {
  if (!(await redis.set(redisKeys.demoAccount, String(Date.now()), 'NX'))) return undefined;
  const account = (await findAccountByEmail(redis, DEMO_EMAIL)) ?? (await createAccount(redis, { email: DEMO_EMAIL, name: 'Demo' }));
  await changeCredit(redis, account.id, 'grant', creditMicros, 'demo account credit');
  const { key } = await createApiKey(redis, secret, account.id, 'demo');
  return key;
}
