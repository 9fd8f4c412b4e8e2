// Prefix affinity: requests that share leading content (a tenant's system
// prompt, the earlier turns of a conversation) go to the endpoint that served
// that prefix before, whose prefix cache already holds it. The request's
// leading content arrives as chained block hashes; the policy remembers which
// endpoint each block chain last went to and prefers the one holding the
// longest matching chain. If that endpoint is busier than the least loaded
// by more than `maxImbalance` requests, the request spills to the least loaded
// and the prefix's home moves there. A prefix never seen goes, among the
// endpoints not busier than that, to the one that is home to the fewest
// prefixes (as SGLang's router sends new text to its smallest tree), so that
// tenants spread evenly over the caches.
import { LRUCache } from 'lru-cache';
import { byLoad, type Candidate, type RoutingPolicy, type RoutingRequest } from './policy.js';

export interface PrefixAffinitySettings {
  /** How many more requests than the least loaded the prefix's home may have before the request spills. */
  maxImbalance: number;
  /** Block chains remembered (least recently used are forgotten). */
  maxEntries?: number;
}

export class PrefixAffinityPolicy implements RoutingPolicy {
  private readonly homes: LRUCache<string, string>;
  /** Leading blocks (one per distinct prefix) each endpoint is home to. */
  private readonly homeCounts = new Map<string, number>();
  private readonly leadingBlocks: LRUCache<string, string>;

  constructor(private readonly settings: PrefixAffinitySettings) {
    const max = settings.maxEntries ?? 200_000;
    this.homes = new LRUCache({ max });
    this.leadingBlocks = new LRUCache({ max, dispose: (endpoint) => this.countHome(endpoint, -1) });
  }

  order<C extends Candidate>(candidates: C[], request: RoutingRequest): C[] {
    const ranked = byLoad(candidates);
    if (ranked.length <= 1) return ranked;
    const home = this.home(candidates, request) ?? this.firstHome(ranked, request);
    const leastLoad = ranked[0].load / ranked[0].weight;
    if (!home || home.load / home.weight - leastLoad > this.settings.maxImbalance) return ranked;
    return [home, ...ranked.filter((c) => c !== home)];
  }

  onRouted(endpoint: string, request: RoutingRequest): void {
    for (const block of request.prefixBlocks) this.homes.set(block, endpoint);
    const leading = request.prefixBlocks[0];
    if (leading && this.leadingBlocks.peek(leading) !== endpoint) {
      this.leadingBlocks.set(leading, endpoint);
      this.countHome(endpoint, 1);
    }
  }

  private countHome(endpoint: string, delta: number): void {
    this.homeCounts.set(endpoint, (this.homeCounts.get(endpoint) ?? 0) + delta);
  }

  /** The candidate that served the longest chain of this request's blocks. */
  private home<C extends Candidate>(candidates: C[], request: RoutingRequest): C | undefined {
    for (let i = request.prefixBlocks.length - 1; i >= 0; i--) {
      const name = this.homes.peek(request.prefixBlocks[i]);
      const found = name && candidates.find((c) => c.name === name);
      if (found) return found;
    }
    return undefined;
  }

  /**
   * A prefix never seen: the endpoint home to the fewest prefixes (relative
   * to weight) among those not too busy; ties go by the first block's hash
   * (rendezvous hashing), so that the choice does not depend on list order.
   */
  private firstHome<C extends Candidate>(ranked: C[], request: RoutingRequest): C | undefined {
    const first = request.prefixBlocks[0];
    if (!first) return undefined;
    const leastLoad = ranked[0].load / ranked[0].weight;
    const eligible = ranked.filter((c) => c.load / c.weight - leastLoad <= this.settings.maxImbalance);
    const homes = (c: C) => (this.homeCounts.get(c.name) ?? 0) / c.weight;
    let best = eligible[0];
    for (const c of eligible) {
      if (homes(c) < homes(best) || (homes(c) === homes(best) && rendezvousScore(first, c.name) > rendezvousScore(first, best.name))) best = c;
    }
    return best;
  }
}

function rendezvousScore(key: string, name: string): number {
  // FNV-1a over key and name: cheap, stable across processes.
  let h = 0x811c9dc5;
  for (const s of [key, '\u0000', name]) {
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return h;
}
