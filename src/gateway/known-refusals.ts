// An account that its hold found with no room left in its rate window, at
// its bound of requests in flight, with nothing of its balance available, or
// whose key's budget had nothing left, gets the same refusal from its next request's hold, once that
// request's body has been read, parsed and checked and its prompt counted:
// the costliest part of a request, done for nothing, on the main thread and
// the prompt counter every tenant on the replica shares. A refusal counts
// nothing, so nothing bounds how many a client gets: one that retries at
// once (an agent looping without back-off, a script gone wrong) would spend
// them on refusals. So the replica remembers what the hold said, and the
// account's next request meets it before its body is read:
// - a window with no room for any request (its requests, or its tokens, at
//   the limit) has none until its minute ends: while the limits are the
//   same, the 429 is answered from memory;
// - requests in flight, a balance with nothing available, or a key's budget
//   with nothing left, may change at any time (a request ended, a top-up, a
//   hold released), so they are read again, a Redis call or two and no body:
//   still at the bound, the 429; still nothing, the 402 (or the key's 429);
//   else the request goes on as any other.
// And the account's refusals are paced, one per REFUSAL_SPACING_MS on each
// replica whichever key they come with, the rest waiting their turn with
// their bodies unread: a client that sends the next request as soon as one
// is refused, over as many connections as it likes, gets a hundred refusals
// a second, not as many as the replica's main thread can make.
// A request of an account with nothing remembered pays one map lookup.
// `node bench/refused-tenant.mjs` measures what a refused tenant costs
// another, retrying at once or at a set rate (figures in bench/README.md).
import { setTimeout as sleep } from 'node:timers/promises';
import { LRUCache } from 'lru-cache';
import type { Redis } from 'ioredis';
import type { Caller } from '../accounts/key-authenticator.js';
import { budgetRenewsAt, keySpend } from '../accounts/api-keys.js';
import { admissionStanding, type HoldResult } from '../billing/credit-ledger.js';
import { formatMicros } from '../billing/prices.js';
import { insufficientBalance, keyBudgetSpent } from '../protocol/errors.js';
import { limitsOf, rateCheck, rateUse, type RateLimits, type RateUse } from '../ratelimit/rate-limiter.js';
import { failClosed } from './fail-closed.js';
import { rateLimitRefusal } from './rate-limit-headers.js';

/** What the last holds said of an account that no request of it (or of one of its keys) can get past. */
interface Known {
  /** Its window, with no room for any request until its minute ends. */
  window?: { minute: number; over: 'requests' | 'tokens'; use: RateUse };
  /** It had its bound of requests in flight: where the window stood then. */
  inFlight?: RateUse;
  /** Its balance had nothing available. */
  noCredit?: boolean;
  /** Its keys whose budget had nothing left. */
  spentKeys?: Set<string>;
  /** When the account's next refusal may be answered. */
  nextTurn: number;
}

/** Who asks: the account, the key and its budget, and the account's own limits. */
type Asking = Pick<Caller, 'account' | 'keyId' | 'budget' | 'limits'>;

export const REFUSAL_SPACING_MS = 10;

/** Whether a request of `keyId` that spends credit must have its account's standing read again first. */
const readAgain = (known: Known, keyId: string) => Boolean(known.inFlight || known.noCredit || known.spentKeys?.has(keyId));
const minuteOf = (ms: number) => Math.floor(ms / 60_000);
const sameLimits = (a: RateLimits, b: RateLimits) => a.requestsPerMinute === b.requestsPerMinute && a.tokensPerMinute === b.tokensPerMinute;

export class KnownRefusals {
  /** Bounded: an account forgotten is only refused the long way again. */
  private readonly byAccount = new LRUCache<string, Known>({ max: 10_000 });

  constructor(private readonly redis: Redis) {}

  private known(account: string): Known {
    let known = this.byAccount.get(account);
    if (!known) this.byAccount.set(account, (known = { nextTurn: 0 }));
    return known;
  }

  /**
   * What a hold for `caller` came to: a window left with no room, the bound of requests in flight, a balance with
   * none available or a key's budget with none left is remembered.
   */
  heardHold(caller: Pick<Caller, 'account' | 'keyId'>, hold: HoldResult): void {
    if (hold.kind === 'no_credit' && hold.available <= 0) this.known(caller.account).noCredit = true;
    else if (hold.kind === 'over_budget' && hold.left <= 0) (this.known(caller.account).spentKeys ??= new Set()).add(caller.keyId);
    else if (hold.kind === 'rate_limited' && hold.over === 'in_flight') this.known(caller.account).inFlight = hold.rate;
    else if (hold.kind === 'rate_limited') this.heardWindow(caller.account, hold.rate);
  }

  /** Where `account`'s window stood when a request was refused or counted: remembered if it has no room left. */
  heardWindow(account: string, use: RateUse): void {
    const { requestsPerMinute, tokensPerMinute } = use.limits;
    const over = use.requests >= requestsPerMinute ? 'requests' : use.tokens >= tokensPerMinute ? 'tokens' : undefined;
    if (over) this.known(account).window = { minute: minuteOf(Date.now()), over, use };
  }

  /**
   * Before a body is read: the refusal the caller's request is known to get, once its turn comes (its window still
   * full under its limits, the account's own or else the `defaults`; or, for a request that `spends` credit, its
   * requests in flight still at the bound, or its balance or its key's budget, read again, still with nothing), as a
   * promise that rejects; one that resolves where they have room now; undefined for a caller with nothing known,
   * whose request goes on at once.
   */
  refusalBeforeBody(caller: Asking, defaults: RateLimits, spends: boolean): Promise<void> | undefined {
    const known = this.byAccount.get(caller.account);
    if (!known) return undefined;
    const now = Date.now();
    const limits = limitsOf(caller.limits, defaults);
    if (!this.windowStillFull(known, now, limits) && !(spends && readAgain(known, caller.keyId))) {
      if (!known.inFlight && !known.noCredit && !known.spentKeys?.size) this.byAccount.delete(caller.account);
      return undefined;
    }
    const turn = Math.max(now, known.nextTurn);
    known.nextTurn = turn + REFUSAL_SPACING_MS;
    return (turn > now ? sleep(turn - now) : Promise.resolve()).then(() => this.refusalOnItsTurn(caller, known, limits, spends));
  }

  /** Whether the window known is still full at `now`: for its minute, under the same limits; forgotten once it is not. */
  private windowStillFull(known: Known, now: number, limits: RateLimits): boolean {
    if (!known.window) return false;
    if (minuteOf(now) === known.window.minute && sameLimits(limits, known.window.use.limits)) return true;
    known.window = undefined;
    return false;
  }

  private async refusalOnItsTurn(caller: Asking, known: Known, limits: RateLimits, spends: boolean): Promise<void> {
    const now = Date.now();
    if (this.windowStillFull(known, now, limits)) {
      const { over, use } = known.window!;
      throw rateLimitRefusal(over, rateUse(rateCheck(caller.account, limits, 0, now), use.requests, use.tokens));
    }
    if (!spends || !readAgain(known, caller.keyId)) return;
    // In the hold's order. The read reclaims the account's holds whose replica died, with what they held of their keys' budgets.
    const { available, inFlight } = await failClosed(admissionStanding(this.redis, caller.account));
    if (known.inFlight) {
      if (limits.concurrentRequests > 0 && inFlight >= limits.concurrentRequests) {
        throw rateLimitRefusal('in_flight', rateUse(rateCheck(caller.account, limits, 0, now), known.inFlight.requests, known.inFlight.tokens));
      }
      known.inFlight = undefined;
    }
    if (available <= 0) throw insufficientBalance();
    known.noCredit = false;
    const budget = caller.budget;
    if (!known.spentKeys?.has(caller.keyId) || !budget) return void known.spentKeys?.delete(caller.keyId);
    const { spent, held } = await failClosed(keySpend(this.redis, { account: caller.account, id: caller.keyId, budget }, now));
    if (budget.limit - spent - held <= 0) throw keyBudgetSpent(formatMicros(budget.limit), budget.period, budgetRenewsAt(budget.period, now));
    known.spentKeys.delete(caller.keyId);
  }
}
