// A batch's input is read on a thread of its own: its parse, checks, order
// and stored texts (input-reading.ts), inputs read at once taking turns in
// slices. Parsing a create body of 32 MiB of small requests held the main
// thread 1.0 to 1.6 s (2026-11-29), and every other request on the replica
// waited it out; here only the other batches' inputs do. What comes back is
// strings and numbers, which cost the main thread a copy, not a parse
// (test/batches/large-lines.test.ts: a stall of 73 ms, not 1,378).
import { Worker } from 'node:worker_threads';
import { ApiError, internalError, type ErrorType } from '../protocol/errors.js';
import type { BatchInput, ReadInput } from './input-reading.js';

// The built worker, from src/batches (tests) or dist/batches alike, as engine/prompt-counter.ts finds its own.
const WORKER_FILE = new URL('../../dist/batches/intake-worker.js', import.meta.url);

interface Answer {
  id: number;
  read?: ReadInput;
  refusal?: { status: number; type: ErrorType; message: string; code: string | null; param: string | null };
  failure?: string;
}

let thread: Worker | undefined;
let lastId = 0;
const waiting = new Map<number, (answer: Answer) => void>();

function intakeThread(): Worker {
  if (thread) return thread;
  const worker = new Worker(WORKER_FILE);
  worker.unref();
  worker.on('message', (answer: Answer) => {
    waiting.get(answer.id)?.(answer);
    waiting.delete(answer.id);
  });
  // A thread that dies fails the inputs it held (a 500 each); the next input starts another.
  worker.on('error', (err) => console.error(`parley: the batch intake thread failed: ${err.message}`));
  worker.on('exit', () => {
    if (thread === worker) thread = undefined;
    for (const [id, answer] of waiting) answer({ id, failure: 'the batch intake thread stopped' });
    waiting.clear();
  });
  thread = worker;
  return worker;
}

/**
 * Reads a batch's input on the intake thread: what is stored of it, or rejects with its 400. `input.content` is
 * handed over where it is a buffer of its own, and cannot be read here afterwards.
 */
export function readOnIntakeThread(input: BatchInput): Promise<ReadInput> {
  const id = ++lastId;
  return new Promise((resolve, reject) => {
    waiting.set(id, ({ read, refusal, failure }) => {
      if (read) resolve(read);
      else if (refusal) reject(new ApiError(refusal.status, refusal.type, refusal.message, refusal.code, refusal.param));
      else {
        console.error(`parley: a batch's input could not be read: ${failure}`);
        reject(internalError());
      }
    });
    // Handed over rather than copied (a copy of 32 MiB held the main thread 36 ms), where the bytes are a buffer of
    // their own and not a slice of Node's shared pool.
    const { buffer, byteOffset, byteLength } = input.content;
    const own = byteOffset === 0 && byteLength === buffer.byteLength && buffer instanceof ArrayBuffer;
    intakeThread().postMessage({ id, input }, own ? [buffer] : []);
  });
}
