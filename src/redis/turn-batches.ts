// Work asked for within one turn of the event loop, handed over together:
// under load, several requests' Redis scripts become one script call, for
// the price of one round trip and one script run. On a Redis Cluster, a
// script may only touch keys of one slot: there a turn's work becomes one
// call per slot. Against a call per request (MAX_BATCH 1), `node
// bench/fast-paths.mjs turn-batches` gave 1.36 times the whole requests/s at
// 32 connections, and 349 against 437 µs of main-thread CPU a request
// (2026-11-27; rounds 1.36 1.36 1.56 1.02); behind a 20 ms first byte at 16
// connections (`... turn-batches 6 4 16 20`), 660 against 743 µs.
import calculateSlot from 'cluster-key-slot';
import type { Redis } from './connection.js';
import { isCluster } from './shared-redis.js';

// A script's KEYS and ARGV grow with its batch; past this many items a turn's work goes in several calls.
const MAX_BATCH = 64;

/** Gathers what is added within one turn and passes it on in parts of at most MAX_BATCH, in the order added. */
export class TurnBatches<T> {
  private batch: T[] = [];
  private readonly slotKeyOf: ((item: T) => string) | undefined;

  /**
   * `handOver` sends a part's commands on `redis` before it returns (before
   * any await). `slotKeyOf` names a key of the item's slot: on a cluster, each
   * part holds items of one slot, in the order added.
   */
  constructor(redis: Redis, private readonly handOver: (part: T[]) => void, slotKeyOf: (item: T) => string) {
    this.slotKeyOf = isCluster(redis) ? slotKeyOf : undefined;
  }

  add(item: T): void {
    if (this.batch.length === 0) setImmediate(() => this.flush());
    this.batch.push(item);
  }

  private flush(): void {
    const taken = this.batch;
    this.batch = [];
    for (const group of this.bySlot(taken)) {
      for (let i = 0; i < group.length; i += MAX_BATCH) this.handOver(group.slice(i, i + MAX_BATCH));
    }
  }

  private bySlot(items: T[]): T[][] {
    if (!this.slotKeyOf) return [items];
    const groups = new Map<number, T[]>();
    for (const item of items) {
      const slot = calculateSlot(this.slotKeyOf(item));
      const group = groups.get(slot);
      if (group) group.push(item);
      else groups.set(slot, [item]);
    }
    return [...groups.values()];
  }
}
