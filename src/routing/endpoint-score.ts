// How the policies weigh an endpoint, in one place. Its inputs, each shown
// per endpoint in the admin endpoints view:
// - the fleet's requests there, in flight and waiting (this replica's live
//   counts, the others' as last shared: routing/fleet-load.ts);
// - the engine's requests that the fleet did not send (its own running and
//   waiting beyond the fleet's, as last read: routing/engine-reports.ts), so
//   that work reaching an engine another way counts against it;
// - the engine's KV-cache use: an engine near full preempts and recomputes,
//   so new work goes to one that is not, while there is one;
// - the engine's own queue: a request sent to an engine with requests
//   waiting waits for a running one to end, seconds where replies are long.
//   Once an engine has queued, the most it ran while queueing is its
//   capacity, and whether a request would queue is read off the live load.
// Load is compared relative to weight. Prefix affinity adds where the key's
// prompt is cached (policies/prefix-affinity.ts): a request stays there
// while it is within the load bound, not KV-full, and waiting in its queue
// (the requests ahead, times how long a request holds a slot there, over its
// capacity; the hold as the engine reports its requests' run time, else as
// the fleet's requests held one there, shared each interval) costs less
// than reading the prompt again elsewhere (its tokens at the model's
// `prefillTokensPerSecond`); otherwise it goes to the cheapest of the others
// (queue plus reading), first in the key's order on a tie.
import type { Candidate } from './policies/policy.js';
import type { EngineReport } from './engine-reports.js';

/** KV-cache use from which an engine takes no new work while another endpoint has room. */
export const KV_CACHE_FULL = 0.9;

/** The requests an endpoint has: the fleet's (`fleetLoad`) and those the engine reports from elsewhere. */
export const endpointLoad = (fleetLoad: number, engine: EngineReport) => fleetLoad + engine.external;

export const isKvCacheFull = (c: Candidate) => (c.kvCacheUse ?? 0) >= KV_CACHE_FULL;

/**
 * The requests ahead of one sent now in the engine's queue: where the engine has shown its capacity, how far its
 * requests now (live: the fleet's, and the engine's from elsewhere) overfill it; else the queue it last reported
 * (up to an interval old). Requiring a reported queue too was tried: on engine-load-routing.mjs's scenario (c)
 * the session then stayed behind its flooded home (p90 60x alone, against 1.4x), the reading being up to an
 * interval old.
 */
export function queueAhead(c: Candidate): number {
  if (c.capacity !== undefined) return Math.max(0, c.load + 1 - c.capacity);
  const reported = c.engineQueue ?? 0;
  return reported > 0 ? reported + 1 : 0;
}

/**
 * How long a request sent now would wait in the engine's queue: a slot frees every (time a request holds one ÷
 * capacity), and it needs as many to free as are ahead of it. Unknown (no request held one yet): forever.
 */
export function queueWaitMs(c: Candidate): number {
  const ahead = queueAhead(c);
  if (ahead === 0) return 0;
  if (c.heldMs === undefined || c.capacity === undefined) return Infinity;
  return (ahead * c.heldMs) / Math.max(1, c.capacity);
}

/** What reading a prompt of `promptTokens` again on another engine costs, at `tokensPerSecond`. */
export const rereadMs = (promptTokens: number | undefined, tokensPerSecond: number) => ((promptTokens ?? 0) * 1000) / tokensPerSecond;

/** Those not KV-full first, then least loaded relative to weight; ties keep the given order. */
export function byLoad<C extends Candidate>(candidates: C[]): C[] {
  return candidates
    .map((c, i) => ({ c, i, full: Number(isKvCacheFull(c)) }))
    .sort((a, b) => a.full - b.full || a.c.load / a.c.weight - b.c.load / b.c.weight || a.i - b.i)
    .map(({ c }) => c);
}
