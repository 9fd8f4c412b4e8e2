// What Parley knows of one endpoint while it serves: requests in flight and
// waiting, its circuit breaker, latency and how much of its prompts its cache
// served. It outlives routing-file reloads (keyed by the endpoint's name), so
// an edit does not forget that an endpoint is down or busy.
//
// The queue is fair between accounts: one account may take at most
// `accountQueueShare` of its places, and a freed slot goes to the accounts
// waiting in turn, so that one team's burst neither fills the queue nor
// makes the others wait behind all of it.
import { Cancelled } from '../protocol/errors.js';
import type { Cancellation } from '../upstream/cancellation.js';
import { CircuitBreaker, type BreakerSettings, type BreakerState } from './circuit-breaker.js';

export interface EndpointLimits {
  /** Requests at once; beyond it, requests wait in a bounded queue. */
  maxConcurrent: number;
  maxQueue: number;
  /** The share of the queue's places one account's requests may take. */
  accountQueueShare: number;
}

export interface EndpointSnapshot {
  name: string;
  health: 'healthy' | 'unhealthy' | 'recovering';
  circuit: BreakerState;
  inFlight: number;
  queued: number;
  requests: number;
  failures: number;
  /** The share of prompt tokens the upstream reported served from its cache, over the last CACHE_SHARE_MINUTES. */
  cachedTokenShare: number;
  latencyMs: { ewma: number | null; lastFirstByte: number | null };
}

interface Waiter {
  resolve(): void;
  reject(err: Error): void;
}

const EWMA_WEIGHT = 0.2;
export const CACHE_SHARE_MINUTES = 5;

/** Prompt and cached tokens of one minute. */
interface MinuteOfUsage {
  minute: number;
  prompt: number;
  cached: number;
}

export class QueueTimeout extends Error {}

export class EndpointState {
  inFlight = 0;
  /** Waiters by account, in the order the accounts take their turns. */
  private readonly waiting = new Map<string, Waiter[]>();
  private waiters = 0;
  readonly breaker: CircuitBreaker;
  private requests = 0;
  private failures = 0;
  /** The last CACHE_SHARE_MINUTES minutes that had usage, oldest first. */
  private recentUsage: MinuteOfUsage[] = [];
  private latencyEwma: number | null = null;
  private lastLatency: number | null = null;
  limits: EndpointLimits;

  constructor(readonly name: string, limits: EndpointLimits, breaker: BreakerSettings, private readonly now: () => number = Date.now) {
    this.limits = limits;
    this.breaker = new CircuitBreaker(breaker);
  }

  /** In flight plus waiting: what least-load policies compare. */
  get load(): number {
    return this.inFlight + this.waiters;
  }

  get queued(): number {
    return this.waiters;
  }

  hasFreeSlot(): boolean {
    return this.inFlight < this.limits.maxConcurrent;
  }

  /** Whether `account` may wait for a slot: the queue has room, and the account has not taken its share of it. */
  hasQueueRoom(account: string): boolean {
    const { maxQueue, accountQueueShare } = this.limits;
    const own = this.waiting.get(account)?.length ?? 0;
    return this.waiters < maxQueue && own < Math.max(1, Math.floor(maxQueue * accountQueueShare));
  }

  /** Takes a slot now if one is free. */
  tryAcquire(): boolean {
    if (!this.hasFreeSlot() || this.waiters > 0) return false;
    this.inFlight++;
    return true;
  }

  /** Waits in the queue for a slot, up to `timeoutMs` or until the request is cancelled. */
  async acquireQueued(account: string, timeoutMs: number, cancellation: Cancellation): Promise<void> {
    // A request whose client has already left takes no place in the queue.
    if (cancellation.cancelled) throw new Cancelled();
    if (this.tryAcquire()) return;
    await new Promise<void>((resolve, reject) => {
      const leave = (err: Error) => {
        const own = this.waiting.get(account);
        const i = own?.indexOf(waiter) ?? -1;
        if (own && i >= 0) {
          own.splice(i, 1);
          this.waiters--;
          if (own.length === 0) this.waiting.delete(account);
        }
        waiter.reject(err);
      };
      const timer = setTimeout(() => leave(new QueueTimeout(`waited ${timeoutMs} ms for ${this.name}`)), timeoutMs);
      const unsubscribe = cancellation.subscribe(() => leave(new Cancelled()));
      const stopWaiting = () => {
        clearTimeout(timer);
        unsubscribe();
      };
      const waiter: Waiter = {
        resolve: () => {
          stopWaiting();
          resolve();
        },
        reject: (err) => {
          stopWaiting();
          reject(err);
        },
      };
      const own = this.waiting.get(account);
      if (own) own.push(waiter);
      else this.waiting.set(account, [waiter]);
      this.waiters++;
    });
  }

  /** Gives the slot back; the first waiter of the account whose turn it is, if any, takes it. */
  release(): void {
    const turn = this.waiting.entries().next();
    if (turn.done) return void this.inFlight--;
    const [account, own] = turn.value;
    const next = own.shift()!;
    this.waiters--;
    // The account goes to the back of the line, behind every other account waiting.
    this.waiting.delete(account);
    if (own.length > 0) this.waiting.set(account, own);
    next.resolve();
  }

  recordSuccess(caller: string, firstByteMs: number): void {
    this.requests++;
    this.breaker.onSuccess(caller);
    this.lastLatency = firstByteMs;
    this.latencyEwma = this.latencyEwma === null ? firstByteMs : this.latencyEwma * (1 - EWMA_WEIGHT) + firstByteMs * EWMA_WEIGHT;
  }

  recordFailure(caller: string, refused: boolean, confirmed: boolean): void {
    this.requests++;
    this.failures++;
    this.breaker.onFailure(caller, refused, confirmed);
  }

  recordUsage(promptTokens: number, cachedTokens: number): void {
    const minute = Math.floor(this.now() / 60_000);
    let last = this.recentUsage.at(-1);
    if (last?.minute !== minute) {
      last = { minute, prompt: 0, cached: 0 };
      this.recentUsage = [...this.recentUsage.filter((m) => m.minute > minute - CACHE_SHARE_MINUTES), last];
    }
    last.prompt += promptTokens;
    last.cached += cachedTokens;
  }

  private recentCachedShare(): number {
    const since = Math.floor(this.now() / 60_000) - CACHE_SHARE_MINUTES;
    let prompt = 0;
    let cached = 0;
    for (const m of this.recentUsage) {
      if (m.minute <= since) continue;
      prompt += m.prompt;
      cached += m.cached;
    }
    return prompt === 0 ? 0 : cached / prompt;
  }

  snapshot(): EndpointSnapshot {
    const circuit = this.breaker.state;
    return {
      name: this.name,
      health: circuit === 'closed' ? 'healthy' : circuit === 'open' ? 'unhealthy' : 'recovering',
      circuit,
      inFlight: this.inFlight,
      queued: this.waiters,
      requests: this.requests,
      failures: this.failures,
      cachedTokenShare: this.recentCachedShare(),
      latencyMs: { ewma: this.latencyEwma === null ? null : Math.round(this.latencyEwma), lastFirstByte: this.lastLatency },
    };
  }
}
