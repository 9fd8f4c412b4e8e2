// Graceful shutdown. On SIGTERM the gateway stops being ready (Kubernetes
// takes it out of the Service), refuses new requests with a 503, and lets the
// requests in flight finish up to the grace period; then it stops the rest:
// their streams end with the error event, their holds are released unpaid.
import type { ServerResponse } from 'node:http';

const AFTER_STOP_MS = 2_000;

/** What ends one running request, linked into the list of them. */
interface Stopper {
  stop: () => void;
  prev: Stopper | undefined;
  next: Stopper | undefined;
}

export class Lifecycle {
  private inFlight = 0;
  private idle: (() => void) | undefined;
  // A linked list, not a Map: a Map that gains and loses an entry per request
  // leaves, in each table V8 discards as it rehashes, references to the
  // entries it held. Once such a table is in the old generation, every
  // scavenge keeps the requests it reaches alive and promotes them; nodes
  // unlinked here keep nothing (measured with bench/gc-survival.mjs, in git history).
  private stoppers: Stopper | undefined;
  draining = false;
  /** True once the grace period is over: requests still running end now. */
  stopped = false;

  get requestsInFlight(): number {
    return this.inFlight;
  }

  /**
   * Counts a request as in flight until both its handler (`work`) has finished
   * and its response has closed: a client that leaves early closes the
   * response while the handler may still be waiting on Redis for its hold,
   * and that hold must be settled before shutdown lets Redis go.
   */
  track<T>(res: ServerResponse, work: Promise<T>): Promise<T> {
    this.inFlight++;
    let open = 2;
    const finished = () => {
      if (--open > 0) return;
      this.inFlight--;
      if (this.inFlight === 0) this.idle?.();
    };
    res.once('close', finished);
    work.then(finished, finished);
    return work;
  }

  /** What ends the request answered by `res` if it is still running when the grace period is over. */
  onStop(res: ServerResponse, stop: () => void): void {
    const node: Stopper = { stop, prev: undefined, next: this.stoppers };
    if (this.stoppers) this.stoppers.prev = node;
    this.stoppers = node;
    res.once('close', () => {
      if (node.prev) node.prev.next = node.next;
      else this.stoppers = node.next;
      if (node.next) node.next.prev = node.prev;
      node.prev = node.next = undefined;
    });
  }

  /** Stops taking requests and waits for those in flight, stopping any still running after `graceMs`. */
  async drain(graceMs: number): Promise<void> {
    this.draining = true;
    if (!(await this.waitIdle(graceMs))) {
      console.warn(`parley: ${this.inFlight} requests still running after the ${graceMs} ms grace period; ending them`);
      this.stopped = true;
      // Each stop may unlink its own node at once: the next one is read first.
      for (let node = this.stoppers, next; node; node = next) {
        next = node.next;
        node.stop();
      }
      await this.waitIdle(AFTER_STOP_MS);
    }
  }

  private waitIdle(ms: number): Promise<boolean> {
    if (this.inFlight === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.idle = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }
}
