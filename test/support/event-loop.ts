// What a test's work did to the main thread's event loop: every request in
// the process waits out a stall of it, and out each pause of its garbage
// collector.
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';

/**
 * The most `measure` finds while `work` runs, in ms (`measure` starts measuring and answers a function that
 * stops and answers the figure). A round slowed by the machine (two cores shared with other test files) is
 * measured again, up to three, while the figure is `under` or more.
 */
async function mostInRounds(label: string, measure: () => () => number, work: (round: number) => Promise<void>, under: number): Promise<number> {
  let most = Infinity;
  for (let round = 1; round <= 3 && most >= under; round++) {
    const stop = measure();
    // A timer's turn before the work and one after it: the sampler reports a stall when its timer runs late
    // against its last run, so that work that never yields is seen too.
    const sampled = () => new Promise((resolve) => setTimeout(resolve, 20));
    await sampled();
    await work(round);
    await sampled();
    most = stop();
    console.log(`parley test: ${label}; ${most.toFixed(1)} ms (round ${round})`);
  }
  return most;
}

/** The longest the event loop stalled while `work` ran, in ms. */
export function longestStall(label: string, work: (round: number) => Promise<void>, under: number): Promise<number> {
  const measure = () => {
    const loop = monitorEventLoopDelay({ resolution: 5 });
    loop.enable();
    return () => {
      loop.disable();
      return loop.max / 1e6;
    };
  };
  return mostInRounds(`${label}: the loop's longest stall`, measure, work, under);
}

/** The longest pause of the garbage collector while `work` ran, in ms. */
export function longestCollection(label: string, work: (round: number) => Promise<void>, under: number): Promise<number> {
  const measure = () => {
    let longest = 0;
    const collections = new PerformanceObserver((list) => {
      for (const pause of list.getEntries()) longest = Math.max(longest, pause.duration);
    });
    collections.observe({ entryTypes: ['gc'] });
    return () => {
      // Pauses not yet handed to the callback are taken as well.
      for (const pause of collections.takeRecords()) longest = Math.max(longest, pause.duration);
      collections.disconnect();
      return longest;
    };
  };
  return mostInRounds(`${label}: the collector's longest pause`, measure, work, under);
}
