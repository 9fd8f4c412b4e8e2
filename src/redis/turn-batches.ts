// Work asked for within one turn of the event loop, handed over together:
// under load, several requests' Redis scripts become one script call, for
// the price of one round trip and one script run.

/** Gathers what is added within one turn and passes it on in parts of at most `maxBatch`, in the order added. */
export class TurnBatches<T> {
  private batch: T[] = [];

  constructor(private readonly maxBatch: number, private readonly handOver: (part: T[]) => void) {}

  add(item: T): void {
    if (this.batch.length === 0) setImmediate(() => this.flush());
    this.batch.push(item);
  }

  private flush(): void {
    const taken = this.batch;
    this.batch = [];
    for (let i = 0; i < taken.length; i += this.maxBatch) this.handOver(taken.slice(i, i + this.maxBatch));
  }
}
