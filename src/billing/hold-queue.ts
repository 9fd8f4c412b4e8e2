// Holds asked for within one turn of the event loop go to Redis together, in
// one script call, applied in the order they were asked: the same outcome as
// one call each, for the price of one round trip.
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { TurnBatches } from '../redis/turn-batches.js';
import { holdCredits, type HoldAsk, type HoldResult } from './credit-ledger.js';

/** A hold never sent: Redis was not connected when its turn came, so nothing of it can stand in Redis. */
export class HoldNotSent extends Error {
  constructor() {
    super('Redis is not connected');
  }
}

interface Waiting {
  ask: HoldAsk;
  held: (result: HoldResult) => void;
  failed: (err: unknown) => void;
}

export class HoldQueue {
  private readonly batches: TurnBatches<Waiting>;

  constructor(private readonly redis: Redis) {
    this.batches = new TurnBatches(redis, (part) => void this.run(part), (w) => redisKeys.account(w.ask.hold.account));
  }

  /** The hold's result; rejects with the error that kept it from Redis. */
  hold(ask: HoldAsk): Promise<HoldResult> {
    return new Promise((held, failed) => this.batches.add({ ask, held, failed }));
  }

  private async run(part: Waiting[]): Promise<void> {
    // Parley's connections queue nothing while disconnected: a hold sent now would fail unsent. Where the state
    // changes between this look and the send, the hold counts as one that may stand, which costs only a release.
    if (this.redis.status !== 'ready') {
      for (const w of part) w.failed(new HoldNotSent());
      return;
    }
    try {
      const results = await holdCredits(this.redis, part.map((w) => w.ask));
      part.forEach((w, i) => w.held(results[i]));
    } catch (err) {
      for (const w of part) w.failed(err);
    }
  }
}
