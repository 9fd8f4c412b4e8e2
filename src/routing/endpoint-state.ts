// What Parley knows of one endpoint while it serves: requests in flight and
// waiting, its circuit breaker, latency and how much of its prompts its cache
// served. It outlives routing-file reloads (keyed by the endpoint's name), so
// an edit does not forget that an endpoint is down or busy.
//
// Admission: `maxConcurrent` requests at once, from the whole fleet where the
// replicas share Redis (routing/fleet-slots.ts), else from this replica.
// Waiting requests are admitted by service tier, priority, then default,
// then flex; a newcomer never passes a waiter of its own tier or a higher
// one. Flex leaves slots free for the rest (mayAdmit), so that interactive
// work arriving beside a flex flood finds one. Within a tier the queue is fair
// between accounts: one account may take at most `accountQueueShare` of its
// places, and a freed slot goes to the accounts waiting in turn.
import { ADMISSION_ORDER, type ServiceTier } from '../protocol/service-tier.js';
import { Cancelled } from '../protocol/errors.js';
import type { Cancellation } from '../upstream/cancellation.js';
import { CircuitBreaker, type BreakerSettings, type BreakerState } from './circuit-breaker.js';
import { flexMaxConcurrent, mayAdmit, POLL_MS, RecentPeak } from './admission-rule.js';
import type { FleetSlots } from './fleet-slots.js';
import type { Holds } from './engine-reports.js';

export interface EndpointLimits {
  /** Requests at once (the fleet's, where it shares Redis); beyond it, requests wait in a bounded queue. */
  maxConcurrent: number;
  /** This replica's queue. */
  maxQueue: number;
  /** The share of the queue's places one account's requests may take. */
  accountQueueShare: number;
  /** The engine schedules by request priority: flex may fill every slot (admission-rule.ts). */
  flexFillsAll: boolean;
}

export interface EndpointSnapshot {
  name: string;
  health: 'healthy' | 'unhealthy' | 'recovering';
  circuit: BreakerState;
  /** The fleet's flex requests the endpoint takes at once now: `maxConcurrent`, or less where the engine shows less (admission-rule.ts flexMaxConcurrent). */
  flexMaxConcurrent: number;
  /** This replica's requests holding a slot, and waiting for one (all tiers, and by tier). */
  inFlight: number;
  queued: number;
  queuedByTier: Record<ServiceTier, number>;
  requests: number;
  failures: number;
  /** The share of prompt tokens the upstream reported served from its cache, over the last CACHE_SHARE_MINUTES. */
  cachedTokenShare: number;
  latencyMs: { ewma: number | null; lastFirstByte: number | null; held: number | null };
}

interface Waiter {
  account: string;
  tier: ServiceTier;
  resolve(slot: Slot): void;
  reject(err: Error): void;
}

/**
 * A slot a request holds on an endpoint, with the fleet's lease that goes
 * with it (none where the fleet's slots are not shared, or Redis was away).
 * It is given back once, however often `release` is called: a slot released
 * twice would lower the endpoint's count below what it has open, and free
 * another request's lease.
 */
export class Slot {
  private free: (() => void) | undefined;

  constructor(free: () => void) {
    this.free = free;
  }

  release(): void {
    const free = this.free;
    this.free = undefined;
    free?.();
  }
}

const EWMA_WEIGHT = 0.2;
const ewma = (average: number | undefined, value: number) => (average === undefined ? value : average * (1 - EWMA_WEIGHT) + value * EWMA_WEIGHT);
const rounded = (ms: number | undefined) => (ms === undefined ? null : Math.round(ms));
export const CACHE_SHARE_MINUTES = 5;
/** Prompt and cached tokens of one minute. */
interface MinuteOfUsage {
  minute: number;
  prompt: number;
  cached: number;
}

export class QueueTimeout extends Error {}

export class EndpointState {
  /** This replica's requests holding a slot. */
  inFlight = 0;
  private inFlightFlex = 0;
  /** The most other-tier requests this replica held at once lately (the fleet's is kept in Redis). */
  private readonly otherPeak: RecentPeak;
  /** Per tier, waiters by account, in the order the accounts take their turns. */
  private readonly waiting: Record<ServiceTier, Map<string, Waiter[]>> = { priority: new Map(), default: new Map(), flex: new Map() };
  private readonly waitersByTier: Record<ServiceTier, number> = { priority: 0, default: 0, flex: 0 };
  private waiters = 0;
  private polling = false;
  /** Wakes the admitting loop early when a slot of this replica's frees. */
  private wake: (() => void) | undefined;
  readonly breaker: CircuitBreaker;
  private requests = 0;
  private failures = 0;
  /** The last CACHE_SHARE_MINUTES minutes that had usage, oldest first. */
  private recentUsage: MinuteOfUsage[] = [];
  private latencyEwma: number | undefined;
  /** How long a request holds a slot here, from admission to its last byte (EWMA), in ms; undefined before the first. */
  heldMs: number | undefined;
  /** This replica's requests that gave back a slot here since takeHolds last took them, for the fleet's figure. */
  private holds: Holds = { requests: 0, ms: 0 };
  private lastLatency: number | null = null;
  limits: EndpointLimits;
  /** Requests waiting inside the engine, where it reports them (routing/engine-reports.ts). */
  engineWaiting: () => number = () => 0;
  /** What the engine runs at once for the fleet (its capacity less its work from elsewhere), where it has shown it. */
  engineCapacity: () => number | undefined = () => undefined;

  /** `fleet`: where the fleet's slots are counted; without it, this replica's own. */
  constructor(
    readonly name: string,
    limits: EndpointLimits,
    breaker: BreakerSettings,
    private readonly fleet?: FleetSlots,
    private readonly now: () => number = Date.now,
  ) {
    this.limits = limits;
    this.breaker = new CircuitBreaker(breaker);
    this.otherPeak = new RecentPeak(now);
  }

  /** In flight plus waiting: what least-load policies compare. */
  get load(): number {
    return this.inFlight + this.waiters;
  }

  get queued(): number {
    return this.waiters;
  }

  /**
   * Whether `account` may wait for a slot at `tier`: the queue has room, and the account has not taken its share
   * of it. Flex waiters count only against flex: a batch waiting for idle slots never fills the queue an
   * interactive request needs.
   */
  hasQueueRoom(account: string, tier: ServiceTier): boolean {
    const { maxQueue, accountQueueShare } = this.limits;
    const counted = tier === 'flex' ? ADMISSION_ORDER : ADMISSION_ORDER.filter((t) => t !== 'flex');
    let own = 0;
    let all = 0;
    for (const t of counted) {
      own += this.waiting[t].get(account)?.length ?? 0;
      all += this.waitersByTier[t];
    }
    return all < maxQueue && own < Math.max(1, Math.floor(maxQueue * accountQueueShare));
  }

  /** Takes a slot now if one is free for `tier` and no request of its tier or a higher one waits here. */
  async tryAcquire(tier: ServiceTier): Promise<Slot | undefined> {
    if (this.waitingAtOrAbove(tier) || !this.hasLocalRoom(tier)) return undefined;
    return this.take(tier);
  }

  /** Waits in the queue for a slot, up to `timeoutMs` or until the request is cancelled. */
  async acquireQueued(account: string, tier: ServiceTier, timeoutMs: number, cancellation: Cancellation): Promise<Slot> {
    // A request whose client has already left takes no place in the queue.
    if (cancellation.cancelled) throw new Cancelled();
    // Where no slot is free here, the request joins the queue before anything is awaited.
    const now = !this.waitingAtOrAbove(tier) && this.hasLocalRoom(tier) ? await this.take(tier) : undefined;
    if (now) return now;
    return new Promise<Slot>((resolve, reject) => {
      const leave = (err: Error) => {
        if (this.dequeue(waiter)) waiter.reject(err);
      };
      const timer = setTimeout(() => leave(new QueueTimeout(`waited ${timeoutMs} ms for ${this.name}`)), timeoutMs);
      const unsubscribe = cancellation.subscribe(() => leave(new Cancelled()));
      const stopWaiting = () => {
        clearTimeout(timer);
        unsubscribe();
      };
      const waiter: Waiter = {
        account,
        tier,
        resolve: (slot) => {
          stopWaiting();
          resolve(slot);
        },
        reject: (err) => {
          stopWaiting();
          reject(err);
        },
      };
      const byAccount = this.waiting[tier];
      const own = byAccount.get(account);
      if (own) own.push(waiter);
      else byAccount.set(account, [waiter]);
      this.waiters++;
      this.waitersByTier[tier]++;
      void this.admitWaiting();
    });
  }


  private waitingAtOrAbove(tier: ServiceTier): boolean {
    for (const t of ADMISSION_ORDER) {
      if (this.waitersByTier[t] > 0) return true;
      if (t === tier) return false;
    }
    return false;
  }

  /**
   * Sharing the fleet's slots, only that this replica is not past the limit alone: Redis applies the rule. Flex
   * is also held back while the engine reports requests waiting inside it: flex work queued there would be
   * ahead of interactive requests an engine that does not schedule by priority cannot tell apart, and work from
   * elsewhere already fills it.
   */
  private hasLocalRoom(tier: ServiceTier): boolean {
    if (tier === 'flex' && !this.limits.flexFillsAll && this.engineWaiting() > 0) return false;
    const held = { flex: this.inFlightFlex, other: this.inFlight - this.inFlightFlex };
    const maxConcurrent = this.maxConcurrentFor(tier);
    return this.fleet ? this.inFlight < maxConcurrent : mayAdmit(tier, maxConcurrent, held, this.otherPeak.value(), this.limits.flexFillsAll);
  }

  /** The fleet's requests of `tier` that may be here at once: the operator's limit, and for flex what the engine shows it runs. */
  private maxConcurrentFor(tier: ServiceTier): number {
    return tier === 'flex' ? flexMaxConcurrent(this.limits.maxConcurrent, this.engineCapacity()) : this.limits.maxConcurrent;
  }

  /** Takes a slot here and, sharing Redis, one of the fleet's; undefined when the fleet has none free for `tier`. */
  private async take(tier: ServiceTier): Promise<Slot | undefined> {
    this.countHeld(tier, 1);
    if (tier !== 'flex') this.otherPeak.note(this.inFlight - this.inFlightFlex);
    if (!this.fleet) return this.slot(tier, undefined);
    try {
      const lease = await this.fleet.acquire(this.name, tier, { maxConcurrent: this.maxConcurrentFor(tier), flexFillsAll: this.limits.flexFillsAll });
      if (lease) return this.slot(tier, lease);
    } catch {
      // Redis is away: this replica's own count is all there is (and the request's credit hold fails anyway).
      return this.slot(tier, undefined);
    }
    this.countHeld(tier, -1);
    return undefined;
  }

  /** A slot taken, which gives back its own count and lease; the waiter whose turn it is, if any, takes it. */
  private slot(tier: ServiceTier, lease: string | undefined): Slot {
    const taken = this.now();
    return new Slot(() => {
      const held = this.now() - taken;
      this.heldMs = ewma(this.heldMs, held);
      this.holds.requests++;
      this.holds.ms += held;
      this.countHeld(tier, -1);
      if (lease) this.fleet?.release(this.name, lease);
      this.wake?.();
      if (this.waiters > 0) void this.admitWaiting();
    });
  }

  /** The requests that gave back a slot here since the last call, and how long they held it in all (routing/engine-reports.ts). */
  takeHolds(): Holds {
    const taken = this.holds;
    this.holds = { requests: 0, ms: 0 };
    return taken;
  }

  private countHeld(tier: ServiceTier, change: 1 | -1): void {
    this.inFlight += change;
    if (tier === 'flex') this.inFlightFlex += change;
  }

  /** The first waiter in admission order: the highest tier waiting, the account whose turn it is. */
  private nextWaiter(): Waiter | undefined {
    for (const tier of ADMISSION_ORDER) {
      const turn = this.waiting[tier].values().next();
      if (!turn.done) return turn.value[0];
    }
    return undefined;
  }

  /** Removes a waiter from the queue; its account goes to the back of its tier's line. False when it had left already. */
  private dequeue(waiter: Waiter): boolean {
    const byAccount = this.waiting[waiter.tier];
    const own = byAccount.get(waiter.account);
    const i = own?.indexOf(waiter) ?? -1;
    if (!own || i < 0) return false;
    own.splice(i, 1);
    byAccount.delete(waiter.account);
    if (own.length > 0) byAccount.set(waiter.account, own);
    this.waiters--;
    this.waitersByTier[waiter.tier]--;
    return true;
  }

  /**
   * Admits waiters in order while slots are free for them, looking again every POLL_MS while anyone waits (a
   * slot another replica frees is found so).
   */
  private async admitWaiting(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      for (let waiter = this.nextWaiter(); waiter; waiter = this.nextWaiter()) {
        const taken = this.hasLocalRoom(waiter.tier) ? await this.take(waiter.tier) : undefined;
        if (taken && this.dequeue(waiter)) waiter.resolve(taken);
        else if (taken) taken.release();
        // The room flex leaves for others shrinks with time, and another replica may free a slot: look again soon.
        else await this.nextLook();
      }
    } finally {
      this.polling = false;
    }
  }

  /** Resolves after POLL_MS, or sooner when a slot of this replica's frees. */
  private nextLook(): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.wake?.(), POLL_MS);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
    });
  }

  recordSuccess(caller: string, firstByteMs: number): void {
    this.requests++;
    this.breaker.onSuccess(caller);
    this.lastLatency = firstByteMs;
    this.latencyEwma = ewma(this.latencyEwma, firstByteMs);
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
      flexMaxConcurrent: this.maxConcurrentFor('flex'),
      inFlight: this.inFlight,
      queued: this.waiters,
      queuedByTier: { ...this.waitersByTier },
      requests: this.requests,
      failures: this.failures,
      cachedTokenShare: this.recentCachedShare(),
      latencyMs: { ewma: rounded(this.latencyEwma), lastFirstByte: this.lastLatency, held: rounded(this.heldMs) },
    };
  }
}
