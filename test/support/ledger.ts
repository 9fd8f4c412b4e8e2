// One hold or one settlement alone, as the ledger tests ask for them; the
// gateway only ever sends batches (billing/hold-queue.ts, settlement-queue.ts).
import type { Redis } from 'ioredis';
import { holdCredits, settleHolds, type HoldRequest, type HoldResult, type Settlement } from '../../src/billing/credit-ledger.js';
import { readUsageEvents, type UsageEvent } from '../../src/billing/usage-events.js';
import type { RateCheck } from '../../src/ratelimit/rate-limiter.js';

/** One hold alone (see holdCredits). */
export async function holdCredit(redis: Redis, h: HoldRequest, rate?: RateCheck): Promise<HoldResult> {
  const [result] = await holdCredits(redis, [{ hold: h, rate }]);
  return result;
}

/** One settlement alone: what it was charged, or undefined when it was settled before. */
export async function settleHold(redis: Redis, s: Settlement, keepEventsMs = 0): Promise<number | undefined> {
  const [result] = await settleHolds(redis, [s], keepEventsMs);
  if (result === 'refused') throw new Error(`settlement ${s.requestId} refused: its amounts are not whole numbers`);
  return result === 'already settled' ? undefined : result.charged;
}

/** Every usage event of an account, oldest first. */
export async function usageEventsOf(redis: Redis, account: string): Promise<UsageEvent[]> {
  const all: UsageEvent[] = [];
  for await (const e of readUsageEvents(redis, account)) all.push(e);
  return all;
}
