// The prompt prefixes a model's traffic has shown lately, in the order they
// were first seen: what prefix placement is computed from. Each replica
// notes what it sees; shared through Redis (routing/prefix-sharing.ts), the
// fleet's order replaces each replica's own, so that every replica places
// every prefix alike. The request path only reads what is here.

/** A prefix unseen this long is forgotten, and its place goes to others. */
export const PREFIX_IDLE_MS = 10 * 60_000;
/** The most prefixes kept; beyond it the least recently seen go. */
export const MAX_KNOWN_PREFIXES = 4096;

export class KnownPrefixes {
  private order: string[] = [];
  private readonly firstSeen = new Map<string, number>();
  /** In the order last seen, least recent first: a prefix seen again is moved to the end. */
  private readonly lastSeen = new Map<string, number>();
  private unshared = new Set<string>();
  /** The last first-seen time given: two prefixes first seen in one millisecond still get their order. */
  private lastFirstSeen = 0;
  /** Changes whenever the order changes other than by a prefix added at its end, so that placements can grow in place until then. */
  epoch = 0;

  constructor(private readonly now: () => number = Date.now) {}

  /** On the request path: cheap, and never reorders; trim() forgets, in the background. */
  saw(key: string): void {
    if (this.lastSeen.delete(key)) this.lastSeen.set(key, this.now());
    else {
      this.order.push(key);
      this.lastFirstSeen = Math.max(this.now(), this.lastFirstSeen + 0.001);
      this.firstSeen.set(key, this.lastFirstSeen);
      this.lastSeen.set(key, this.now());
    }
    this.unshared.add(key);
  }

  /** In the order first seen. */
  keys(): readonly string[] {
    return this.order;
  }

  /** What was seen since the last call, each with when this replica first saw it, for sharing: the fleet orders by that. */
  takeUnshared(): [key: string, firstSeenMs: number][] {
    const taken = [...this.unshared].map((key): [string, number] => [key, this.firstSeen.get(key) ?? this.now()]);
    this.unshared = new Set();
    return taken;
  }

  /** Takes the fleet's order; what this replica saw that the fleet does not have yet keeps its place after it. */
  adopt(fleetOrder: string[]): void {
    const fleet = new Set(fleetOrder);
    const next = [...fleetOrder, ...this.order.filter((k) => !fleet.has(k) && this.unshared.has(k))];
    if (next.length === this.order.length && next.every((k, i) => k === this.order[i])) return;
    for (const k of this.lastSeen.keys()) {
      if (fleet.has(k) || this.unshared.has(k)) continue;
      this.lastSeen.delete(k);
      this.firstSeen.delete(k);
    }
    for (const k of fleetOrder) {
      if (this.lastSeen.has(k)) continue;
      this.lastSeen.set(k, this.now());
      this.firstSeen.set(k, this.now());
    }
    this.order = next;
    this.epoch++;
  }

  /** Forgets what has not been seen for PREFIX_IDLE_MS, and the least recently seen beyond MAX_KNOWN_PREFIXES. */
  trim(): void {
    const since = this.now() - PREFIX_IDLE_MS;
    const over = this.lastSeen.size - MAX_KNOWN_PREFIXES;
    const gone: string[] = [];
    for (const [key, seen] of this.lastSeen) {
      if (seen >= since && gone.length >= over) break;
      gone.push(key);
    }
    this.forget(gone);
  }

  private forget(keys: string[]): void {
    if (keys.length === 0) return;
    const gone = new Set(keys);
    this.order = this.order.filter((k) => !gone.has(k));
    for (const k of gone) {
      this.lastSeen.delete(k);
      this.firstSeen.delete(k);
    }
    this.epoch++;
  }
}
