// Work asked for within one turn of the event loop, handed over together:
// under load, several requests' Redis scripts become one script call, for
// the price of one round trip and one script run. And every batch due on one
// connection in a turn (the holds and the settlements) is handed over at
// once, its commands written to the socket in one system call.
import type { Redis } from 'ioredis';

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

  /** `handOver` sends a part's commands on `redis` before it returns (before any await). */
  constructor(redis: Redis, private readonly handOver: (part: T[]) => void) {
    this.turn = turnOf(redis);
  }

  add(item: T): void {
    if (this.batch.length === 0) this.turn.schedule(this);
    this.batch.push(item);
  }

  flush(): void {
    const taken = this.batch;
    this.batch = [];
    for (let i = 0; i < taken.length; i += MAX_BATCH) this.handOver(taken.slice(i, i + MAX_BATCH));
  }
}
