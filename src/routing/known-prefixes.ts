// The affinity keys a model's traffic has shown lately, in the order the
// fleet first saw them: what prefix placement is computed from. Each replica
// notes what it sees; shared through Redis (routing/prefix-sharing.ts), the
// fleet's order replaces each replica's own, so that every replica places
// every key alike. The request path only reads what is here.

/** A key unseen this long is forgotten, and its place goes to others. */
export const PREFIX_IDLE_MS = 10 * 60_000;
/** The most keys kept; beyond it the least recently seen go. */
export const MAX_KNOWN_PREFIXES = 4096;

export class KnownPrefixes {
  private order: string[] = [];
  /** In the order last seen, least recent first: a key seen again is moved to the end. */
  private readonly lastSeen = new Map<string, number>();
  private unshared = new Set<string>();
  /** Changes whenever the order changes other than by keys added at its end, so that placements can grow in place until then. */
  epoch = 0;

  constructor(private readonly now: () => number = Date.now) {}

  has(key: string): boolean {
    return this.lastSeen.has(key);
  }

  /** On the request path: cheap, and never reorders; trim() forgets, in the background. */
  saw(key: string): void {
    if (!this.lastSeen.delete(key)) this.order.push(key);
    this.lastSeen.set(key, this.now());
    this.unshared.add(key);
  }

  /** In the order first seen. */
  keys(): readonly string[] {
    return this.order;
  }

  /** What was seen since the last call, for sharing. */
  takeUnshared(): string[] {
    const taken = [...this.unshared];
    this.unshared = new Set();
    return taken;
  }

  /** Takes the fleet's order; what this replica saw that the fleet does not have yet keeps its place after it. */
  adopt(fleetOrder: string[]): void {
    const fleet = new Set(fleetOrder);
    const next = [...fleetOrder, ...this.order.filter((k) => !fleet.has(k) && this.unshared.has(k))];
    for (const k of this.lastSeen.keys()) {
      if (!fleet.has(k) && !this.unshared.has(k)) this.lastSeen.delete(k);
    }
    for (const k of fleetOrder) {
      if (!this.lastSeen.has(k)) this.lastSeen.set(k, this.now());
    }
    const grown = next.length >= this.order.length && this.order.every((k, i) => k === next[i]);
    if (!grown) this.epoch++;
    this.order = next;
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
    for (const k of gone) this.lastSeen.delete(k);
    this.epoch++;
  }
}
