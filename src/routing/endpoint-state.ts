// What Parley knows of one endpoint while it serves: requests in flight and
// waiting, its circuit breaker, latency and how much of its prompts its cache
// served. It outlives routing-file reloads (keyed by the endpoint's name), so
// an edit does not forget that an endpoint is down or busy.
import { Cancelled } from '../protocol/errors.js';
import type { Cancellation } from '../upstream/cancellation.js';
import { CircuitBreaker, type BreakerSettings, type BreakerState } from './circuit-breaker.js';

export interface EndpointLimits {
  /** Requests at once; beyond it, requests wait in a bounded queue. */
  maxConcurrent: number;
  maxQueue: number;
}

export interface EndpointSnapshot {
  name: string;
  health: 'healthy' | 'unhealthy' | 'recovering';
  circuit: BreakerState;
  inFlight: number;
  queued: number;
  requests: number;
  failures: number;
  cachedTokenShare: number;
  latencyMs: { ewma: number | null; lastFirstByte: number | null };
}

interface Waiter {
  resolve(): void;
  reject(err: Error): void;
}

const EWMA_WEIGHT = 0.2;

export class QueueTimeout extends Error {}

export class EndpointState {
  inFlight = 0;
  private readonly waiters: Waiter[] = [];
  readonly breaker: CircuitBreaker;
  private requests = 0;
  private failures = 0;
  private promptTokens = 0;
  private cachedTokens = 0;
  private latencyEwma: number | null = null;
  private lastLatency: number | null = null;
  limits: EndpointLimits;

  constructor(readonly name: string, limits: EndpointLimits, breaker: BreakerSettings) {
    this.limits = limits;
    this.breaker = new CircuitBreaker(breaker);
  }

  /** In flight plus waiting: what least-load policies compare. */
  get load(): number {
    return this.inFlight + this.waiters.length;
  }

  get queued(): number {
    return this.waiters.length;
  }

  hasFreeSlot(): boolean {
    return this.inFlight < this.limits.maxConcurrent;
  }

  hasQueueRoom(): boolean {
    return this.waiters.length < this.limits.maxQueue;
  }

  /** Takes a slot now if one is free. */
  tryAcquire(): boolean {
    if (!this.hasFreeSlot() || this.waiters.length > 0) return false;
    this.inFlight++;
    return true;
  }

  /** Waits in the queue for a slot, up to `timeoutMs` or until the request is cancelled. */
  async acquireQueued(timeoutMs: number, cancellation: Cancellation): Promise<void> {
    // A request whose client has already left takes no place in the queue.
    if (cancellation.cancelled) throw new Cancelled();
    if (this.tryAcquire()) return;
    await new Promise<void>((resolve, reject) => {
      const leave = (err: Error) => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
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
      this.waiters.push(waiter);
    });
  }

  /** Gives the slot back; the next waiter, if any, takes it. */
  release(): void {
    const next = this.waiters.shift();
    if (next) next.resolve();
    else this.inFlight--;
  }

  recordSuccess(firstByteMs: number): void {
    this.requests++;
    this.breaker.onSuccess();
    this.lastLatency = firstByteMs;
    this.latencyEwma = this.latencyEwma === null ? firstByteMs : this.latencyEwma * (1 - EWMA_WEIGHT) + firstByteMs * EWMA_WEIGHT;
  }

  recordFailure(refused: boolean): void {
    this.requests++;
    this.failures++;
    this.breaker.onFailure(refused);
  }

  recordUsage(promptTokens: number, cachedTokens: number): void {
    this.promptTokens += promptTokens;
    this.cachedTokens += cachedTokens;
  }

  snapshot(): EndpointSnapshot {
    const circuit = this.breaker.state;
    return {
      name: this.name,
      health: circuit === 'closed' ? 'healthy' : circuit === 'open' ? 'unhealthy' : 'recovering',
      circuit,
      inFlight: this.inFlight,
      queued: this.waiters.length,
      requests: this.requests,
      failures: this.failures,
      cachedTokenShare: this.promptTokens === 0 ? 0 : this.cachedTokens / this.promptTokens,
      latencyMs: { ewma: this.latencyEwma === null ? null : Math.round(this.latencyEwma), lastFirstByte: this.lastLatency },
    };
  }
}
