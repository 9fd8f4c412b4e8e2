// GET /user/balance in DeepSeek's shape, for the account of the calling key.
// Parley adds what is held by requests in flight and what is available now.
import type { ServerResponse } from 'node:http';
import type { Caller } from '../accounts/key-authenticator.js';
import { readBalance } from '../billing/credit-ledger.js';
import { formatMicros } from '../billing/prices.js';
import { stateUnavailable } from '../protocol/errors.js';
import { sendJson } from '../protocol/http-io.js';
import type { GatewayContext } from './context.js';

export async function getBalance(res: ServerResponse, ctx: GatewayContext, caller: Caller): Promise<void> {
  let balance;
  try {
    balance = await readBalance(ctx.redis, caller.account);
  } catch {
    throw stateUnavailable();
  }
  const { granted, toppedUp, held } = balance ?? { granted: 0, toppedUp: 0, held: 0 };
  const total = granted + toppedUp;
  sendJson(res, 200, {
    is_available: total - held > 0,
    balance_infos: [
      {
        currency: ctx.routing().billing.currency,
        total_balance: formatMicros(total),
        granted_balance: formatMicros(granted),
        topped_up_balance: formatMicros(toppedUp),
        held_balance: formatMicros(held),
        available_balance: formatMicros(Math.max(0, total - held)),
      },
    ],
  });
}
