// What this replica expects of a key's next credit hold, from the key's last
// one here: whether it will be granted in full. A request whose hold is
// expected in full calls its upstream beside the hold (gateway/dispatch.ts).
// The forecast errs only where something else changed the key's standing
// since (other replicas, the account's other keys, an operator): its rate
// window is counted here from what the last hold saw, so a key this replica
// saw reach its rate limit is not expected in full.
import { LRUCache } from 'lru-cache';
import type { HoldResult } from '../billing/credit-ledger.js';
import type { RateCheck } from '../ratelimit/rate-limiter.js';

/** A key's last hold, granted in full: its rate window as the hold left it. */
interface FullHold {
  window: string;
  requests: number;
  tokens: number;
}

export class HoldForecast {
  private readonly lastFull = new LRUCache<string, FullHold>({ max: 100_000 });

  /** Whether a hold for `keyId`, with the rate check `rate`, is expected to be granted in full. */
  expectsFull(keyId: string, rate: RateCheck): boolean {
    const last = this.lastFull.get(keyId);
    if (!last) return false;
    // A new window starts its counts from nothing.
    if (last.window !== rate.key) return true;
    const [requestsLimit, tokensLimit, tokens] = rate.args;
    return last.requests < requestsLimit && last.tokens + tokens <= tokensLimit;
  }

  /** Notes a key's hold, asked for `askedReplyTokens` per choice: expected in full next time only if granted for all of them. */
  note(keyId: string, rate: RateCheck, hold: HoldResult, askedReplyTokens: number): void {
    if (hold.kind === 'held' && hold.maxReplyTokens >= askedReplyTokens) this.lastFull.set(keyId, { window: rate.key, requests: hold.rate?.requests ?? 0, tokens: hold.rate?.tokens ?? 0 });
    else this.forget(keyId);
  }

  /** A key's hold went unanswered (Redis away): nothing is expected of the next. */
  forget(keyId: string): void {
    this.lastFull.delete(keyId);
  }
}
