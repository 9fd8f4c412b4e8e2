// A batch's results as its client API hands them out: OpenAI's output file
// (the replies) and error file (the rest), Anthropic's one results file, each
// line in input order, read from the batch's results when asked for. A line
// that never ran is written as its batch's end makes it: cancelled or expired.
import type { Redis } from 'ioredis';
import { DOWNLOAD_PART_BYTES } from '../protocol/http-io.js';
import { finalStatus, finishBatch, readBatch, resultPages, type BatchRecord, type FinishedFile } from './batch-store.js';
import { ERRORED, LINE_FORMATS, SUCCEEDED } from './line-formats.js';

export type ResultPart = 'output' | 'error' | 'all';

/** The lines of one part of an ended batch's results, in input order, each with its newline: about DOWNLOAD_PART_BYTES at a time (a line longer goes alone). */
export async function* resultLines(redis: Redis, batch: BatchRecord, part: ResultPart): AsyncGenerator<string> {
  const format = LINE_FORMATS[batch.api];
  const why = batch.status === 'cancelled' || batch.status === 'cancelling' ? 'cancelled' : 'expired';
  let line = 0;
  for await (const page of resultPages(redis, batch.account, batch.id, batch.counts.total)) {
    let text = '';
    for (const r of page) {
      const kind = 'result' in r ? r.result[0] : ERRORED;
      if (part === 'all' || (part === 'output') === (kind === SUCCEEDED)) {
        text += ('result' in r ? r.result.slice(1) : format.unrun(r.unrun, `${batch.id}_${line}`, why)) + '\n';
        if (text.length >= DOWNLOAD_PART_BYTES) {
          yield text;
          text = '';
        }
      }
      line++;
    }
    if (text) yield text;
  }
}

/**
 * Ends a drained batch: its status, and for OpenAI's API its output and error files (named after the batch, so
 * that a finalize taken over from a stalled replica names them the same), sized now so that listing them reads
 * no results.
 */
export async function finalizeBatch(redis: Redis, account: string, id: string, keepMs: number): Promise<void> {
  const status = await finalStatus(redis, account, id);
  const batch = await readBatch(redis, account, id);
  if (!batch) return;
  const files: { output: FinishedFile | null; error: FinishedFile | null } = { output: null, error: null };
  if (batch.api === 'openai') {
    const ended = { ...batch, status };
    for (const part of ['output', 'error'] as const) {
      let bytes = 0;
      for await (const text of resultLines(redis, ended, part)) bytes += Buffer.byteLength(text);
      if (bytes > 0) files[part] = { id: `file-${id}-${part}`, bytes, filename: `${id}_${part}.jsonl` };
    }
  }
  await finishBatch(redis, account, id, status, files, keepMs);
}
