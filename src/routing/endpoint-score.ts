// How the policies weigh an endpoint, in one place. Its inputs, each shown
// per endpoint in the admin endpoints view:
// - the fleet's requests there, in flight and waiting (this replica's live
//   counts, the others' as last shared: routing/fleet-load.ts);
// - the engine's requests that the fleet did not send (its own running and
//   waiting beyond the fleet's, as last read: routing/engine-reports.ts), so
//   that work reaching an engine another way counts against it;
// - the engine's KV-cache use: an engine near full preempts and recomputes,
//   so new work goes to one that is not, while there is one.
// Load is compared relative to weight. Prefix affinity adds the key's home
// (policies/prefix-affinity.ts): a request stays there while the home is
// within the load bound and not KV-full, and spills otherwise.
import type { Candidate } from './policies/policy.js';
import type { EngineReport } from './engine-reports.js';

/** KV-cache use from which an engine takes no new work while another endpoint has room. */
export const KV_CACHE_FULL = 0.9;

/** The requests an endpoint has: the fleet's (`fleetLoad`) and those the engine reports from elsewhere. */
export const endpointLoad = (fleetLoad: number, engine: EngineReport) => fleetLoad + engine.external;

export const isKvCacheFull = (c: Candidate) => (c.kvCacheUse ?? 0) >= KV_CACHE_FULL;

/** Those not KV-full first, then least loaded relative to weight; ties keep the given order. */
export function byLoad<C extends Candidate>(candidates: C[]): C[] {
  return candidates
    .map((c, i) => ({ c, i, full: Number(isKvCacheFull(c)) }))
    .sort((a, b) => a.full - b.full || a.c.load / a.c.weight - b.c.load / b.c.weight || a.i - b.i)
    .map(({ c }) => c);
}
