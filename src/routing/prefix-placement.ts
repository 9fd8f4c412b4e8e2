// Where each prompt prefix lives, computed alike by every gateway replica
// from the same data: consistent hashing with bounded loads (Mirrokni,
// Thorup and Zadimoghaddam, 2018) over rendezvous (highest-random-weight)
// order. Each prefix ranks the endpoints by a hash of the pair, its own
// order; the prefixes, taken in the order they were first seen anywhere in
// the fleet, each take the first endpoint in their order that holds fewer
// prefixes than its bound. A prefix keeps its home as others arrive, and
// losing or gaining an endpoint moves only the prefixes whose order it
// changes, about 1/N of them, plus the few the bounds pass on (the slack
// keeps those few: with none, half of all prefixes moved; test/routing/
// policies.test.ts measures it).

export interface PlacementEndpoint {
  name: string;
  weight: number;
}

/** FNV-1a, then MurmurHash3's finalizer, which FNV needs: alone, its last characters barely reach the high bits. */
function hash32(text: string, seed = 0x811c9dc5): number {
  let h = seed;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The score of `name` for `key` as a fraction in (0, 1]: cheap, and the same in every process. */
function unitHash(key: string, name: string): number {
  return (hash32(name, hash32(key)) + 1) / 0x100000001;
}

/** `endpoints` in `key`'s own order: weighted rendezvous, so an endpoint of weight 2 comes first for twice the keys. */
export function rendezvousOrder<E extends PlacementEndpoint>(key: string, endpoints: E[]): E[] {
  return endpoints
    .map((e) => ({ e, score: -e.weight / Math.log(unitHash(key, e.name)) }))
    .sort((a, b) => b.score - a.score || (a.e.name < b.e.name ? -1 : 1))
    .map(({ e }) => e);
}

/**
 * The most prefixes an endpoint may be home to when `placed` prefixes have
 * homes: its weighted share, rounded up, plus `slack` of it rounded down,
 * so that a few prefixes spread exactly evenly (8 over 4 endpoints is 2
 * each, which caches that hold 2 prompts need) and many spread within the
 * slack, which keeps a change of the fleet from cascading.
 */
function bound(placed: number, weight: number, totalWeight: number, slack: number): number {
  const share = (placed * weight) / totalWeight;
  return Math.ceil(share) + Math.floor(slack * share);
}

export class PrefixPlacement<E extends PlacementEndpoint> {
  private readonly homes = new Map<string, E>();
  private readonly homeCounts = new Map<string, number>();
  private readonly totalWeight: number;

  /** `prefixes` in the order they were first seen. */
  constructor(prefixes: readonly string[], private readonly endpoints: E[], private readonly slack: number) {
    this.totalWeight = endpoints.reduce((sum, e) => sum + e.weight, 0);
    for (const key of prefixes) this.add(key);
  }

  /** How many prefixes have homes. */
  get size(): number {
    return this.homes.size;
  }

  /**
   * Places a prefix first seen after all those placed. Each prefix is bounded by the count placed so far,
   * itself included: one that arrives later never moves those placed before it, so a placement grows in place.
   */
  add(key: string): void {
    const home = this.next(key);
    if (!home) return;
    this.homes.set(key, home);
    this.homeCounts.set(home.name, (this.homeCounts.get(home.name) ?? 0) + 1);
  }

  /** How many prefixes each endpoint is home to. */
  homesPerEndpoint(): Map<string, number> {
    return new Map(this.homeCounts);
  }

  /** The home of `key`: its place among the known prefixes, or for a new one, where it would go next. */
  homeOf(key: string): E | undefined {
    return this.homes.get(key) ?? this.next(key);
  }

  private next(key: string): E | undefined {
    const placed = this.homes.size + 1;
    const order = rendezvousOrder(key, this.endpoints);
    return order.find((e) => (this.homeCounts.get(e.name) ?? 0) < bound(placed, e.weight, this.totalWeight, this.slack)) ?? order[0];
  }
}
