// GET /user/balance in DeepSeek's shape, for the account of the calling key.
// Parley adds what is held by requests in flight and what is available now.
import type { ServerResponse } from 'node:http';
import type { Caller } from '../accounts/key-authenticator.js';
import { balanceSummary } from '../billing/credit-ledger.js';
import { formatMicros } from '../billing/prices.js';
import { sendJson } from '../protocol/http-io.js';
import { failClosed } from './fail-closed.js';
import type { GatewayContext } from './context.js';

export async function getBalance(res: ServerResponse, ctx: GatewayContext, caller: Caller): Promise<void> {
  const { granted, toppedUp, held, total, available } = await failClosed(balanceSummary(ctx.redis, caller.account));
  sendJson(res, 200, {
    is_available: available > 0,
    balance_infos: [
      {
        currency: ctx.routing().billing.currency,
        total_balance: formatMicros(total),
        granted_balance: formatMicros(granted),
        topped_up_balance: formatMicros(toppedUp),
        held_balance: formatMicros(held),
        available_balance: formatMicros(available),
      },
    ],
  });
}
