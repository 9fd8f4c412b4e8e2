// The one interface every way of choosing an endpoint implements. A policy
// sees plain data (names, loads, weights, the request's affinity key), so it
// can be tested alone.
export interface Candidate {
  name: string;
  /** Requests there: the fleet's in flight and waiting, and the engine's from elsewhere (routing/endpoint-score.ts). */
  load: number;
  /** Relative capacity from the routing file. */
  weight: number;
  /** The share of its KV cache the engine last said was in use, where it says (routing/engine-reports.ts). */
  kvCacheUse?: number;
  /** Requests the engine last said were waiting in its own queue, where it says. */
  engineQueue?: number;
  /** The requests the engine runs at once, where it has shown it (routing/engine-reports.ts). */
  capacity?: number;
  /** How long a request holds a slot there lately: the engine's run time where it reports one, else the fleet's holds, else this replica's. */
  heldMs?: number;
}

export interface RoutingRequest {
  /** Which upstream cache the request needs (routing/affinity-key.ts); absent where the policy does not read it. */
  key?: string;
  /** The request's prompt tokens, counted or estimated: what reading it again elsewhere costs. */
  promptTokens?: number;
  /** A new key its account has no quota left for (routing/new-key-quota.ts): routed on it, but not kept. */
  unkept?: boolean;
}

export interface RoutingPolicy {
  /** Whether `order` reads the request's affinity key (SGLang's needs_request_text): only then is it computed. */
  readonly needsKey: boolean;
  /** The candidates in the order to try them: the first is the choice, the rest are for failover. */
  order<C extends Candidate>(candidates: C[], request: RoutingRequest): C[];
  /** Whether the policy has placed `key` before (a key new to it may first be shared with the fleet). */
  isKnown?(key: string): boolean;
  /** How many affinity keys each endpoint is home to, where the policy places keys. */
  homes?(): Map<string, number>;
  /** Requests sent away from where their key's prompt is cached (its home, or where it last went) because that was busy, since the policy was made. */
  readonly spills?: number;
}
