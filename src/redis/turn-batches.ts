// Work asked for within one turn of the event loop, handed over together:
// under load, several requests' Redis scripts become one script call, for
// the price of one round trip and one script run.

// A script's KEYS and ARGV grow with its batch; past this many items a turn's work goes in several calls.
const MAX_BATCH = 64;

/** Gathers what is added within one turn and passes it on in parts of at most MAX_BATCH, in the order added. */
export class TurnBatches<T> {
  private batch: T[] = [];

  constructor(private readonly handOver: (part: T[]) => void) {}

  add(item: T): void {
    if (this.batch.length === 0) setImmediate(() => this.flush());
    this.batch.push(item);
  }

  private flush(): void {
    const taken = this.batch;
    this.batch = [];
    for (let i = 0; i < taken.length; i += MAX_BATCH) this.handOver(taken.slice(i, i + MAX_BATCH));
  }
}
