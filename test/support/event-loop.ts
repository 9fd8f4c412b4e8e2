// What a test's work did to the main thread's event loop: every request in
// the process waits out a stall of it.
import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * The longest the event loop stalled while `work` ran, in ms. A round slowed by the machine (two cores shared
 * with other test files) is measured again, up to three, while the stall is `under` or more.
 */
export async function longestStall(label: string, work: (round: number) => Promise<void>, under: number): Promise<number> {
  let longest = Infinity;
  for (let round = 1; round <= 3 && longest >= under; round++) {
    const loop = monitorEventLoopDelay({ resolution: 5 });
    const sampled = () => new Promise((resolve) => setTimeout(resolve, 20));
    loop.enable();
    // The sampler reports a stall when its timer runs late against its last run: one run before the work, and one
    // after it, so that work that never yields is seen too.
    await sampled();
    await work(round);
    await sampled();
    loop.disable();
    longest = loop.max / 1e6;
    console.log(`parley test: ${label}; the loop's longest stall ${longest.toFixed(1)} ms (round ${round})`);
  }
  return longest;
}
