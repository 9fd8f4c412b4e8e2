// An account that its hold found with no room left in its rate window, or
// with nothing of its balance available, gets the same refusal from its next
// request's hold, once that request's body has been read, parsed and checked
// and its prompt counted: the costliest part of a request, done for nothing,
// on the main thread and the prompt counter every tenant on the replica
// shares. A refusal counts nothing, so nothing bounds how many a client gets:
// one that retries at once (an agent looping without back-off, a script gone
// wrong) would spend them on refusals. So the replica remembers what the hold
// said, and the account's next request meets it before its body is read:
// - a window with no room for any request (its requests, or its tokens, at
//   the limit) has none until its minute ends: while the limits are the
//   same, the 429 is answered from memory;
// - a balance with nothing available may change at any time (a top-up, a
//   hold released), so it is read again, one Redis call and no body: still
//   nothing, the 402; else the request goes on as any other.
// And the account's refusals are paced, one per REFUSAL_SPACING_MS on each
// replica, the rest waiting their turn with their bodies unread: a client
// that sends the next request as soon as one is refused, over as many
// connections as it likes, gets a hundred refusals a second, not as many as
// the replica's main thread can make.
// A request of an account with nothing remembered pays one map lookup.
// `node bench/refused-tenant.mjs` measures what a refused tenant costs
// another, retrying at once or at a set rate (figures in bench/README.md).
import { setTimeout as sleep } from 'node:timers/promises';
import { LRUCache } from 'lru-cache';
import type { Redis } from 'ioredis';
import { balanceSummary, type HoldResult } from '../billing/credit-ledger.js';
import { insufficientBalance } from '../protocol/errors.js';
import { limitsOf, rateCheck, rateUse, type RateLimits, type RateUse } from '../ratelimit/rate-limiter.js';
import { failClosed } from './fail-closed.js';
import { rateLimitRefusal } from './rate-limit-headers.js';

type Known = ({ kind: 'window full'; minute: number; over: 'requests' | 'tokens'; use: RateUse } | { kind: 'no credit' }) & {
  /** When the account's next refusal may be answered. */
  nextTurn: number;
};

export const REFUSAL_SPACING_MS = 10;

const minuteOf = (ms: number) => Math.floor(ms / 60_000);
const sameLimits = (a: RateLimits, b: RateLimits) => a.requestsPerMinute === b.requestsPerMinute && a.tokensPerMinute === b.tokensPerMinute;

export class KnownRefusals {
  /** Bounded: an account forgotten is only refused the long way again. */
  private readonly byAccount = new LRUCache<string, Known>({ max: 10_000 });

  constructor(private readonly redis: Redis) {}

  /** What a hold for `account` came to: a window left with no room, or a balance with none available, is remembered. */
  heardHold(account: string, hold: HoldResult): void {
    if (hold.kind === 'no_credit' && hold.available <= 0) this.byAccount.set(account, { kind: 'no credit', nextTurn: 0 });
    else if (hold.kind === 'rate_limited' && hold.over !== 'in_flight') this.heardWindow(account, hold.rate);
  }

  /** Where `account`'s window stood when a request was refused or counted: remembered if it has no room left. */
  heardWindow(account: string, use: RateUse): void {
    const { requestsPerMinute, tokensPerMinute } = use.limits;
    const over = use.requests >= requestsPerMinute ? 'requests' : use.tokens >= tokensPerMinute ? 'tokens' : undefined;
    if (over) this.byAccount.set(account, { kind: 'window full', minute: minuteOf(Date.now()), over, use, nextTurn: 0 });
  }

  /**
   * Before a body is read: the refusal the account's request is known to get, once its turn comes (its window
   * still full under its limits, its `own` or else the `defaults`, or, for a request that `spends` credit, its
   * balance, read again, still with nothing available), as a promise that rejects; one that resolves where the
   * balance has something now; undefined for an account with nothing known, whose request goes on at once.
   */
  refusalBeforeBody(account: string, own: Partial<RateLimits>, defaults: RateLimits, spends: boolean): Promise<void> | undefined {
    const known = this.byAccount.get(account);
    if (!known || (known.kind === 'no credit' && !spends)) return undefined;
    const now = Date.now();
    const limits = limitsOf(own, defaults);
    if (!this.stillKnown(account, known, now, limits)) return undefined;
    const turn = Math.max(now, known.nextTurn);
    known.nextTurn = turn + REFUSAL_SPACING_MS;
    return (turn > now ? sleep(turn - now) : Promise.resolve()).then(() => this.refusalOnItsTurn(account, known, limits));
  }

  /** Whether what is known still holds at `now`: a window full stays so for its minute, under the same limits; forgotten once it does not. */
  private stillKnown(account: string, known: Known, now: number, limits: RateLimits): boolean {
    if (known.kind !== 'window full' || (minuteOf(now) === known.minute && sameLimits(limits, known.use.limits))) return true;
    if (this.byAccount.get(account) === known) this.byAccount.delete(account);
    return false;
  }

  private async refusalOnItsTurn(account: string, known: Known, limits: RateLimits): Promise<void> {
    if (known.kind === 'window full') {
      const now = Date.now();
      if (!this.stillKnown(account, known, now, limits)) return;
      throw rateLimitRefusal(known.over, rateUse(rateCheck(account, limits, 0, now), known.use.requests, known.use.tokens));
    }
    const { available } = await failClosed(balanceSummary(this.redis, account));
    if (available <= 0) throw insufficientBalance();
    if (this.byAccount.get(account) === known) this.byAccount.delete(account);
  }
}
