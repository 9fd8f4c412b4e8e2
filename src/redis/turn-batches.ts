// Work asked for within one turn of the event loop, handed over together:
// under load, several requests' Redis scripts become one script call, for
// the price of one round trip and one script run. And every batch due on one
// connection in a turn (the holds and the settlements) is handed over at
// once, its commands written to the socket in one system call. On a Redis
// Cluster, a script may only touch keys of one slot: there a turn's work
// becomes one call per slot.
import calculateSlot from 'cluster-key-slot';
import type { Redis } from './connection.js';
import { isCluster } from './shared-redis.js';

// A script's KEYS and ARGV grow with its batch; past this many items a turn's work goes in several calls.
const MAX_BATCH = 64;

interface Flushable {
  flush(): void;
}

/** The batches of one connection that are due at the end of this turn. */
class ConnectionTurn {
  private due: Flushable[] = [];

  constructor(private readonly redis: Redis) {}

  schedule(batches: Flushable): void {
    if (this.due.length === 0) setImmediate(() => this.flush());
    this.due.push(batches);
  }

  private flush(): void {
    const due = this.due;
    this.due = [];
    // ioredis writes each command as it is sent: corked, the turn's commands leave in one write, where
    // each would otherwise cost a system call of its own (bench/gateway-cpu.mjs, in git history, counted them).
    const socket = this.redis.stream;
    socket?.cork();
    try {
      for (const batches of due) batches.flush();
    } finally {
      socket?.uncork();
    }
  }
}

const turns = new WeakMap<Redis, ConnectionTurn>();

function turnOf(redis: Redis): ConnectionTurn {
  let turn = turns.get(redis);
  if (!turn) {
    turn = new ConnectionTurn(redis);
    turns.set(redis, turn);
  }
  return turn;
}

/** Gathers what is added within one turn and passes it on in parts of at most MAX_BATCH, in the order added. */
export class TurnBatches<T> implements Flushable {
  private batch: T[] = [];
  private readonly turn: ConnectionTurn;
  private readonly slotKeyOf: ((item: T) => string) | undefined;

  /**
   * `handOver` sends a part's commands on `redis` before it returns (before
   * any await). `slotKeyOf` names a key of the item's slot: on a cluster, each
   * part holds items of one slot, in the order added.
   */
  constructor(redis: Redis, private readonly handOver: (part: T[]) => void, slotKeyOf: (item: T) => string) {
    this.turn = turnOf(redis);
    this.slotKeyOf = isCluster(redis) ? slotKeyOf : undefined;
  }

  add(item: T): void {
    if (this.batch.length === 0) this.turn.schedule(this);
    this.batch.push(item);
  }

  flush(): void {
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
