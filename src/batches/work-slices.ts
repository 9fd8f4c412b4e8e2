// Long work on one request's input (a batch's lines read, grouped and
// stored) is done in slices of a few ms, with other requests served between.
// Sliced by a count of lines, 1,000 lines of 32 KB went in one slice and held
// the main thread 150 to 280 ms (a one-off script, 2026-11-29).

/** How long one slice of such work runs before it lets other work in. */
const SLICE_MS = 5;

/** The clock of one piece of long work: ask `due()` between steps, and `pause()` when it says so. */
export class WorkSlices {
  private sliceStart = performance.now();

  due(): boolean {
    return performance.now() - this.sliceStart >= SLICE_MS;
  }

  async pause(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    this.sliceStart = performance.now();
  }
}
