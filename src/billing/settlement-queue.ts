// Settlements that must not be lost: a reply that finished while Redis was
// unreachable is still owed. Each settlement is retried until Redis takes it;
// the settle script is idempotent per request id, so a retry that follows a
// lost reply (applied, but the answer never came back) charges nothing twice.
import type { Redis } from 'ioredis';
import { settleHold, type Settlement } from './credit-ledger.js';

const FIRST_RETRY_MS = 200;
const MAX_RETRY_MS = 5_000;

export class SettlementQueue {
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly redis: Redis) {}

  /** Settles now if Redis answers, otherwise keeps trying in the background; resolves once it has landed. */
  settle(s: Settlement): Promise<void> {
    const attempt = this.run(s).finally(() => this.pending.delete(attempt));
    this.pending.add(attempt);
    return attempt;
  }

  get size(): number {
    return this.pending.size;
  }

  /** Waits for what is pending, up to `timeoutMs`; returns how many are still unsettled. */
  async drain(timeoutMs: number): Promise<number> {
    const timeout = new Promise((r) => setTimeout(r, timeoutMs).unref());
    await Promise.race([Promise.all(this.pending), timeout]);
    return this.pending.size;
  }

  private async run(s: Settlement): Promise<void> {
    for (let wait = FIRST_RETRY_MS; ; wait = Math.min(wait * 2, MAX_RETRY_MS)) {
      try {
        await settleHold(this.redis, s);
        return;
      } catch (err) {
        console.warn(`parley: settling ${s.requestId} failed (${(err as Error).message}); retrying in ${wait} ms`);
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }
}
