// Graceful shutdown. On SIGTERM the gateway stops being ready (Kubernetes
// takes it out of the Service), refuses new requests with a 503, and lets the
// requests in flight finish up to the grace period; then it stops the rest:
// their streams end with the error event, their holds are released unpaid.
import type { ServerResponse } from 'node:http';

const AFTER_STOP_MS = 2_000;

export class Lifecycle {
  private inFlight = 0;
  private idle: (() => void) | undefined;
  /** What ends each running request. */
  private readonly stoppers = new Set<() => void>();
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
    this.stoppers.add(stop);
    res.once('close', () => this.stoppers.delete(stop));
  }

  /** Stops taking requests and waits for those in flight, stopping any still running after `graceMs`. */
  async drain(graceMs: number): Promise<void> {
    this.draining = true;
    if (!(await this.waitIdle(graceMs))) {
      console.warn(`parley: ${this.inFlight} requests still running after the ${graceMs} ms grace period; ending them`);
      this.stopped = true;
      // Each stop may delete itself from the set at once: they are listed first.
      for (const stop of [...this.stoppers]) stop();
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
