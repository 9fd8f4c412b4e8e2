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

/** `e`'s weighted rendezvous score for a key (`keyHash`: hash32 of the key): an endpoint of weight 2 comes first for twice the keys. */
const score = (keyHash: number, e: PlacementEndpoint) => -e.weight / Math.log((hash32(e.name, keyHash) + 1) / 0x100000001);

/** Whether `a` (with `aScore`) comes before `b` in a key's order: the higher score, then the name. */
const before = (aScore: number, a: PlacementEndpoint, bScore: number, b: PlacementEndpoint) => aScore > bScore || (aScore === bScore && a.name < b.name);

/** `endpoints` in `key`'s own order. */
export function rendezvousOrder<E extends PlacementEndpoint>(key: string, endpoints: E[]): E[] {
  const keyHash = hash32(key);
  return endpoints
    .map((e) => ({ e, score: score(keyHash, e) }))
    .sort((a, b) => (before(a.score, a.e, b.score, b.e) ? -1 : 1))
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
  /** Each prefix's home, by the home's index in `endpoints`. */
  private readonly homes = new Map<string, number>();
  /** How many prefixes each endpoint (by index) is home to. */
  private readonly homeCounts: number[];
  private readonly totalWeight: number;

  /** `prefixes` in the order they were first seen. */
  constructor(prefixes: readonly string[], private readonly endpoints: E[], private readonly slack: number) {
    this.totalWeight = endpoints.reduce((sum, e) => sum + e.weight, 0);
    this.homeCounts = endpoints.map(() => 0);
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
    if (home < 0) return;
    this.homes.set(key, home);
    this.homeCounts[home]++;
  }

  /** How many prefixes each endpoint is home to. */
  homesPerEndpoint(): Map<string, number> {
    return new Map(this.endpoints.flatMap((e, i) => (this.homeCounts[i] > 0 ? [[e.name, this.homeCounts[i]] as [string, number]] : [])));
  }

  /** The home of `key`: its place among the known prefixes, or for a new one, where it would go next. */
  homeOf(key: string): E | undefined {
    return this.endpoints[this.homes.get(key) ?? this.next(key)];
  }

  /**
   * The index of the first endpoint in `key`'s order that holds fewer prefixes than its bound, else of the first
   * of all (-1: no endpoints). Found in one pass, with the key hashed once, not by sorting: a placement is made
   * again for every known prefix whenever the fleet forgets one, on the path of the next request, and every
   * request then in flight waits. `node bench/prefix-placement.mjs 581be64` put 4,096 prefixes over 8 endpoints
   * at 4.9 ms, against 14.5 ms sorted (over 32 endpoints: 16.8 against 60.2 ms; 2026-11-28).
   */
  private next(key: string): number {
    const placed = this.homes.size + 1;
    const keyHash = hash32(key);
    let first = -1;
    let firstScore = 0;
    let open = -1;
    let openScore = 0;
    this.endpoints.forEach((e, i) => {
      const s = score(keyHash, e);
      if (first < 0 || before(s, e, firstScore, this.endpoints[first])) [first, firstScore] = [i, s];
      const roomy = this.homeCounts[i] < bound(placed, e.weight, this.totalWeight, this.slack);
      if (roomy && (open < 0 || before(s, e, openScore, this.endpoints[open]))) [open, openScore] = [i, s];
    });
    return open >= 0 ? open : first;
  }
}
