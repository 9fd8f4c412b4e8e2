// The one interface every way of choosing an endpoint implements. A policy
// sees plain data (names, loads, weights, the request's prefix hashes), so it
// can be tested alone; the router calls `order` and then `onRouted`.
export interface Candidate {
  name: string;
  /** Requests in flight plus waiting. */
  load: number;
  /** Relative capacity from the routing file. */
  weight: number;
}

export interface RoutingRequest {
  /** Chained hashes of the request's leading content in fixed-size blocks: [0] covers block 1, [i] blocks 1..i+1. */
  prefixBlocks: string[];
}

export interface RoutingPolicy {
  /** Whether `order` reads the request's prefix blocks (SGLang's needs_request_text): only then are they hashed. */
  readonly needsPrefix: boolean;
  /** The candidates in the order to try them: the first is the choice, the rest are for failover. */
  order<C extends Candidate>(candidates: C[], request: RoutingRequest): C[];
  /** The request was sent to `endpoint` (the choice, or where failover took it). */
  onRouted(endpoint: string, request: RoutingRequest): void;
}

/** Least loaded first, relative to weight; ties keep the given order. */
export function byLoad<C extends Candidate>(candidates: C[]): C[] {
  return candidates
    .map((c, i) => ({ c, i }))
    .sort((a, b) => a.c.load / a.c.weight - b.c.load / b.c.weight || a.i - b.i)
    .map(({ c }) => c);
}
