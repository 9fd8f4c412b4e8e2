// Who may take an endpoint's slot, the same on one replica (EndpointState)
// and for the fleet in Redis (FleetSlots): every tier may fill the endpoint;
// flex only so far, leaving room for the others.
import type { ServiceTier } from '../protocol/service-tier.js';

/** How often waiting requests look again for a slot: one another replica freed, or room flex has regained. */
export const POLL_MS = 20;

/** The share of an endpoint's slots flex may not take: with nothing else waiting, flex keeps the rest busy. */
export const FLEX_RESERVE_SHARE = 0.2;

/**
 * The slots flex may fill: all but the reserve (at least one, where there are two); all of them where the engine
 * schedules by priority (`flexFillsAll`), since it puts an interactive request ahead of flex work itself.
 */
export function flexLimit(maxConcurrent: number, flexFillsAll = false): number {
  return maxConcurrent < 2 || flexFillsAll ? maxConcurrent : maxConcurrent - Math.max(1, Math.floor(maxConcurrent * FLEX_RESERVE_SHARE));
}

/**
 * How long flex remembers the most other-tier requests held at once, kept in steps of PEAK_STEP_MS: long enough
 * to span the gaps in a steady interactive flow (a request a second or more), short enough that flex takes back
 * an idle GPU within about a second of that flow stopping (`node bench/service-tiers.mjs` prints flex's share in
 * the 10 s right after a burst, and interactive TTFT beside a flex flood).
 */
export const PEAK_WINDOW_MS = 1_000;
export const PEAK_STEP_MS = 250;
/** The steps a peak is kept: the current one and those before it. */
export const PEAK_STEPS = PEAK_WINDOW_MS / PEAK_STEP_MS;

/**
 * The flex requests the fleet may have at an endpoint at once: the operator's `maxConcurrent`, and where the engine
 * has shown what it runs at once (`capacity`: that, less its work from elsewhere; routing/engine-reports.ts), no
 * more than that. So flex never waits in the engine's own queue, first come first served, where the interactive
 * requests after it would wait behind it: it waits in Parley's, behind them, and `maxConcurrent` need not be
 * guessed for an engine that reports its load. At least one, so that flex still moves on an engine other work
 * fills. The other tiers are bounded by `maxConcurrent` alone: prefix affinity already weighs the engine's queue
 * against reading a prompt again elsewhere (endpoint-score.ts), and bounding them too (capacity and a quarter of
 * it) took long agent sessions off their homes: on `node bench/engine-load-routing.mjs 15 0d9818d b,c` at 3
 * replicas their p90 TTFT went from 456 to 651 ms and their cached share from 0.64 to 0.55 (2026-11-28).
 */
export function flexMaxConcurrent(maxConcurrent: number, capacity: number | undefined): number {
  return capacity === undefined ? maxConcurrent : Math.min(maxConcurrent, Math.max(1, capacity));
}

/** Slots held, flex and the other tiers apart. */
export interface HeldSlots {
  flex: number;
  other: number;
}

/**
 * Whether a request of `tier` may take a slot. Default and priority may fill the endpoint. Flex may fill it up
 * to its flexLimit, and only while it leaves room for as many other requests as were held at once in the last
 * PEAK_WINDOW_MS, plus one: so an interactive request that arrives beside a flex flood finds a slot free at
 * once (nothing that has started is preempted, so the room is kept before it is needed), and with nothing
 * else about, flex keeps flexLimit's share busy. Where the engine schedules by priority (`flexFillsAll`), flex
 * may fill every slot. routing/fleet-slots.ts applies the same rule in Redis.
 */
export function mayAdmit(tier: ServiceTier, maxConcurrent: number, held: HeldSlots, recentPeak: number, flexFillsAll = false): boolean {
  if (tier !== 'flex' || flexFillsAll) return held.flex + held.other < maxConcurrent;
  const roomForOthers = recentPeak > 0 ? recentPeak + 1 : 0;
  return held.flex + held.other < flexLimit(maxConcurrent) && held.flex + roomForOthers < maxConcurrent;
}

/** The most of something at once over the last PEAK_WINDOW_MS, kept as a maximum per PEAK_STEP_MS. */
export class RecentPeak {
  private readonly perStep = new Map<number, number>();

  constructor(private readonly now: () => number = Date.now) {}

  note(count: number): void {
    const step = Math.floor(this.now() / PEAK_STEP_MS);
    this.perStep.set(step, Math.max(this.perStep.get(step) ?? 0, count));
    for (const s of this.perStep.keys()) if (s <= step - PEAK_STEPS) this.perStep.delete(s);
  }

  value(): number {
    const since = Math.floor(this.now() / PEAK_STEP_MS) - PEAK_STEPS;
    let peak = 0;
    for (const [s, count] of this.perStep) if (s > since) peak = Math.max(peak, count);
    return peak;
  }
}
