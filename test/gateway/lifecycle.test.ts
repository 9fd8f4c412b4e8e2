import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { Lifecycle } from '../../src/gateway/lifecycle.js';

/** Enough of a response for the lifecycle: it only listens for 'close'. */
const response = () => new EventEmitter() as unknown as ServerResponse;

describe('Lifecycle', () => {
  it('stops, after the grace period, exactly the requests whose responses are still open, whichever closed first', async () => {
    const lifecycle = new Lifecycle();
    const stopped: string[] = [];
    const running = new Map<string, { res: ServerResponse; done: () => void }>();
    for (const name of ['a', 'b', 'c', 'd', 'e']) {
      const res = response();
      let done!: () => void;
      void lifecycle.track(res, new Promise<void>((resolve) => (done = resolve)));
      lifecycle.onStop(res, () => {
        stopped.push(name);
        // A stopped request ends: its handler returns and its response closes.
        done();
        res.emit('close');
      });
      running.set(name, { res, done });
    }
    // The first, a middle one and the last to start finish before shutdown.
    for (const name of ['a', 'c', 'e']) {
      running.get(name)!.done();
      running.get(name)!.res.emit('close');
    }
    await new Promise((r) => setTimeout(r, 0));
    expect(lifecycle.requestsInFlight).toBe(2);
    await lifecycle.drain(20);
    expect(stopped.sort()).toEqual(['b', 'd']);
    expect(lifecycle.requestsInFlight).toBe(0);
  });

  it('stops nothing when every request finishes within the grace period', async () => {
    const lifecycle = new Lifecycle();
    const res = response();
    let stopped = false;
    void lifecycle.track(res, new Promise<void>((resolve) => setTimeout(resolve, 10)));
    lifecycle.onStop(res, () => (stopped = true));
    setTimeout(() => res.emit('close'), 10);
    await lifecycle.drain(1_000);
    expect(stopped).toBe(false);
  });
});
