// Settlements that must not be lost: a reply that finished while Redis was
// unreachable is still owed. Each settlement is retried until Redis takes it;
// the settle script is idempotent per request id, so a retry that follows a
// lost reply (applied, but the answer never came back) charges nothing twice.
// One that finds Redis away is written to the settlement journal at once, so
// that it outlives this replica too; retries that were backing off go again
// the moment Redis is back.
//
// Settlements made in the same turn of the event loop go to Redis together,
// in one script call: under load that is several requests' worth for the
// price of one round trip.
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { TurnBatches } from '../redis/turn-batches.js';
import { settleHolds, type Settlement } from './credit-ledger.js';
import type { SettlementJournal } from './settlement-journal.js';

const FIRST_RETRY_MS = 200;
const MAX_RETRY_MS = 5_000;

export class SettlementQueue {
  // A count, not a Set of the pending promises: see the list of stoppers in gateway/lifecycle.ts.
  private unsettled = 0;
  /** Called once nothing is left unsettled. */
  private emptied: (() => void)[] = [];
  /** Retries waiting out their back-off, woken early when Redis is back. */
  private backingOff: (() => void)[] = [];
  private readonly batches: TurnBatches<{ settlement: Settlement; landed: () => void }>;

  /** `keepEventsMs`: how long usage events are kept, read at each batch (the routing file may change); 0 keeps them for good. */
  constructor(
    private readonly redis: Redis,
    private readonly keepEventsMs: () => number = () => 0,
    private readonly journal?: SettlementJournal,
  ) {
    this.batches = new TurnBatches(redis, (part) => void this.run(part), (p) => redisKeys.account(p.settlement.account));
    redis.on('ready', () => {
      for (const retry of this.backingOff.splice(0)) retry();
    });
  }

  /** Settles as soon as Redis answers, retrying in the background; resolves once it has landed. */
  settle(s: Settlement): Promise<void> {
    // Redis is away: the settlement goes to disk before anything else happens.
    if (this.redis.status !== 'ready') this.journal?.record(s);
    this.unsettled++;
    return new Promise<void>((landed) => this.batches.add({ settlement: s, landed })).finally(() => {
      if (--this.unsettled === 0) for (const emptied of this.emptied.splice(0)) emptied();
    });
  }

  /** Settles what the journal files an earlier or vanished replica left still owe; returns how many it took on. */
  adoptOrphans(abandonedAfterMs: number): number {
    if (!this.journal) return 0;
    let adopted = 0;
    for (const file of this.journal.orphans(abandonedAfterMs)) {
      let owed: Settlement[];
      try {
        owed = this.journal.adopt(file);
      } catch {
        continue; // another replica adopted it first
      }
      for (const s of owed) void this.settle(s);
      adopted += owed.length;
    }
    return adopted;
  }

  get size(): number {
    return this.unsettled;
  }

  /** Settlements journaled to disk (Redis was away) that have not landed yet. */
  get journaled(): number {
    return this.journal?.owedCount ?? 0;
  }

  /** Waits until nothing is left unsettled, up to `timeoutMs`; returns how many still are. */
  async drain(timeoutMs: number): Promise<number> {
    if (this.unsettled > 0) {
      await new Promise<void>((resolve) => {
        const timeout = setTimeout(resolve, timeoutMs).unref();
        this.emptied.push(() => {
          clearTimeout(timeout);
          resolve();
        });
      });
    }
    return this.unsettled;
  }

  private async run(part: { settlement: Settlement; landed: () => void }[]): Promise<void> {
    for (let wait = FIRST_RETRY_MS; ; wait = Math.min(wait * 2, MAX_RETRY_MS)) {
      try {
        const results = await settleHolds(this.redis, part.map((p) => p.settlement), this.keepEventsMs());
        part.forEach((p, i) => {
          // Retrying cannot mend a malformed settlement; its hold expires unpaid.
          if (results[i] === 'refused') console.error(`parley: settlement ${p.settlement.requestId} refused: its amounts are not whole numbers`);
          this.journal?.landed(p.settlement.requestId);
          p.landed();
        });
        return;
      } catch (err) {
        for (const p of part) this.journal?.record(p.settlement);
        // Each settlement retries on its own, so that one that fails cannot hold back the rest.
        if (part.length > 1) {
          for (const p of part) void this.run([p]);
          return;
        }
        console.warn(`parley: settling ${part[0].settlement.requestId} failed (${(err as Error).message}); retrying in ${wait} ms or when Redis is back`);
        await this.backOff(wait);
      }
    }
  }

  private backOff(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const retry = () => {
        clearTimeout(timer);
        const i = this.backingOff.indexOf(retry);
        if (i >= 0) this.backingOff.splice(i, 1);
        resolve();
      };
      const timer = setTimeout(retry, ms);
      this.backingOff.push(retry);
    });
  }
}
