// ioredis resolves a pipeline whose commands Redis refused, each reply's
// error beside it: a full Redis under noeviction refuses every write with
// OOM, and where it is at its limit some writes pass and some do not. A
// write made of several commands would then be taken as done with parts of
// it missing. execAll throws the first error instead; writeInParts stores
// something too large for one command, and drops what it wrote of it where
// it did not become visible.
import type { ChainableCommander } from 'ioredis';

/** Runs the pipeline; rejects with the first command's error, if any. */
export async function execAll(commands: ChainableCommander): Promise<void> {
  for (const [err] of (await commands.exec()) ?? []) if (err) throw err;
}

/** Whether a transaction failed as one Redis discarded whole (a command refused as it was queued): none of it applied. */
const discarded = (err: unknown): boolean => err instanceof Error && err.message.startsWith('EXECABORT');

/**
 * Writes `parts`, then `commit`, the transaction that makes them visible. Where a part fails, or Redis discards
 * the transaction, what was written is dropped (`drop`) rather than left unlisted until it expires; a transaction
 * whose answer was lost may have applied, and keeps its parts.
 */
export async function writeInParts(parts: () => Promise<void>, commit: () => Promise<unknown>, drop: () => Promise<unknown>): Promise<void> {
  try {
    await parts();
  } catch (err) {
    await drop().catch(() => {});
    throw err;
  }
  try {
    await commit();
  } catch (err) {
    if (discarded(err)) await drop().catch(() => {});
    throw err;
  }
}
