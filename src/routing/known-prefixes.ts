// The affinity keys a model's traffic has shown lately, in the order the
// fleet first saw them: what prefix placement is computed from. Each replica
// notes what it sees; shared through Redis (routing/prefix-sharing.ts), the
// fleet's order comes first, then what this replica saw that the fleet does
// not have yet, so that every replica places every key alike. The request
// path only reads what is here, and notes where it moved a key.
//
// A key's move (policies/prefix-affinity.ts: sent away from its busy home, its
// prompt is cached where it went; or back home) is shared the same way, so
// that every replica counts its prompt cached in one place: the fleet keeps
// each key's latest move, and a replica takes the moves made since it last
// heard.

/** A key unseen this long is forgotten, and its place goes to others. */
export const PREFIX_IDLE_MS = 10 * 60_000;
/** The most keys kept; beyond it the least recently seen go. */
export const MAX_KNOWN_PREFIXES = 4096;

/**
 * How the fleet's order changed since this replica last heard: keys added, each with its place (Redis's
 * first-seen score), and keys the fleet forgot; or, `whole`, the whole order, which replaces what was known.
 */
export interface FleetChange {
  whole: boolean;
  added: [key: string, place: number][];
  forgotten: string[];
  /** Keys' latest moves, each to an endpoint or ('') home; given `whole`, every key away from its home. */
  moves?: [key: string, to: string][];
}

export class KnownPrefixes {
  private order: string[] = [];
  /** The fleet's keys in its order, and each one's place in it. */
  private fleet: string[] = [];
  private readonly places = new Map<string, number>();
  /** In the order last seen, least recent first: a key seen again is moved to the end. */
  private readonly lastSeen = new Map<string, number>();
  private unshared = new Set<string>();
  /** Keys away from their home, each with where it went. */
  private readonly moved = new Map<string, string>();
  /** Moves made here and not yet shared, each to an endpoint or ('') home. */
  private unsharedMoves = new Map<string, string>();
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

  /** Where `key` went instead of its home, if it is away. */
  movedTo(key: string): string | undefined {
    return this.moved.get(key);
  }

  /** Notes that `key` went to `endpoint`, away from its home, or (undefined) home. */
  move(key: string, endpoint: string | undefined): void {
    if (this.moved.get(key) === endpoint) return;
    if (endpoint === undefined) this.moved.delete(key);
    else this.moved.set(key, endpoint);
    this.unsharedMoves.set(key, endpoint ?? '');
  }

  /** The moves made since the last call, for sharing. */
  takeUnsharedMoves(): [key: string, to: string][] {
    const taken = [...this.unsharedMoves];
    this.unsharedMoves = new Map();
    return taken;
  }

  /** Moves taken for sharing that Redis did not take, for the next exchange; a move made since is newer. */
  restoreMoves(moves: [key: string, to: string][]): void {
    for (const [key, to] of moves) if (!this.unsharedMoves.has(key)) this.unsharedMoves.set(key, to);
  }

  /** What was seen since the last call, for sharing. */
  takeUnshared(): string[] {
    const taken = [...this.unshared];
    this.unshared = new Set();
    return taken;
  }

  /**
   * Takes what changed in the fleet's order. Applying a change twice, or one that overlaps the last, changes
   * nothing more: a key both forgotten and added was added again after, at its new place.
   */
  merge(change: FleetChange): void {
    this.applyFleetMoves(change);
    if (!change.whole && change.added.length === 0 && change.forgotten.length === 0) return;
    const added = new Map(change.added);
    const gone = new Set(change.whole ? this.fleet.filter((k) => !added.has(k)) : change.forgotten.filter((k) => !added.has(k) && this.places.has(k)));
    if (gone.size > 0) this.fleet = this.fleet.filter((k) => !gone.has(k));
    for (const k of gone) {
      this.places.delete(k);
      if (this.unshared.has(k)) continue;
      this.lastSeen.delete(k);
      this.moved.delete(k);
    }
    for (const [key, place] of change.added) this.place(key, place);
    const next = [...this.fleet, ...this.order.filter((k) => !this.places.has(k) && this.unshared.has(k))];
    const grown = next.length >= this.order.length && this.order.every((k, i) => k === next[i]);
    if (!grown) this.epoch++;
    this.order = next;
  }

  /** The fleet's moves, under those made here and not yet shared, which are newer (and kept through a whole reload). */
  private applyFleetMoves({ whole, moves = [] }: FleetChange): void {
    if (whole) {
      this.moved.clear();
      for (const [key, to] of this.unsharedMoves) if (to !== '') this.moved.set(key, to);
    }
    for (const [key, to] of moves) {
      if (this.unsharedMoves.has(key)) continue;
      if (to === '') this.moved.delete(key);
      else this.moved.set(key, to);
    }
  }

  /** Puts a fleet key at its place: almost always the end, as places grow with time. */
  private place(key: string, place: number): void {
    const had = this.places.get(key);
    if (had === place) return;
    if (had !== undefined) this.fleet.splice(this.fleet.indexOf(key), 1);
    this.places.set(key, place);
    let i = this.fleet.length;
    while (i > 0 && this.places.get(this.fleet[i - 1])! > place) i--;
    this.fleet.splice(i, 0, key);
    if (!this.lastSeen.has(key)) this.lastSeen.set(key, this.now());
  }

  /**
   * Forgets, of the keys the fleet does not have (seen while Redis was away), those not seen for PREFIX_IDLE_MS
   * and the least recently seen beyond MAX_KNOWN_PREFIXES. The fleet's keys go when the fleet forgets them.
   */
  trim(): void {
    if (this.order.length === this.fleet.length) return;
    const since = this.now() - PREFIX_IDLE_MS;
    const over = this.lastSeen.size - MAX_KNOWN_PREFIXES;
    const gone: string[] = [];
    for (const [key, seen] of this.lastSeen) {
      if (seen >= since && gone.length >= over) break;
      if (!this.places.has(key)) gone.push(key);
    }
    this.forget(gone);
  }

  private forget(keys: string[]): void {
    if (keys.length === 0) return;
    const gone = new Set(keys);
    this.order = this.order.filter((k) => !gone.has(k));
    for (const k of gone) {
      this.lastSeen.delete(k);
      this.unshared.delete(k);
      this.moved.delete(k);
      this.unsharedMoves.delete(k);
    }
    this.epoch++;
  }
}
