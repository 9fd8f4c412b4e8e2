// A batch's input is read on a thread of its own: its parts joined, its
// parse, checks, order and stored texts (input-reading.ts). Parsing a create
// body of 32 MiB of small requests held the main thread 1.0 to 1.6 s
// (2026-11-29), and every other request on the replica waited it out; here
// only the other batches' inputs do. What comes back is the lines' bytes,
// handed back whole (stored-lines.ts), and numbers: nothing to parse (test/
// batches/large-lines.test.ts: a stall of 14 to 35 ms, not 1,378).
//
// The thread reads one input at a time, the accounts that wait taking turns.
// A parse takes many times its input's bytes (a create of 32 MiB of numbers
// grew the process 406 MB, one of `{},` 1.0 GB before inputs so dense were
// refused unparsed: http-io.ts's tooDense), so inputs read at once, from as many accounts as send them, could take the
// replica's memory from every tenant. Those that wait hold only their bytes,
// which their accounts' body allowances count, and leave the line when their
// client does. (A heap limit on the thread is no bound: a worker that reaches
// it can abort the whole process, nodejs/node#47224, as it did here.)
//
// Each account may have its inputs read for READ_MS_PER_MINUTE of the
// thread's time a minute; past it, its next create is refused (429) until
// the minute ends. A refused create costs its sender nothing, and its parse
// a core: without a bound one tenant could keep a core of every replica busy
// for free (1.3 s a create of 32 MiB of small arrays of numbers, the
// costliest parsed), beside every other tenant's requests. A create of 32
// MiB of small requests takes about a second.
import { Worker } from 'node:worker_threads';
import { ApiError, Cancelled, intakeTimeSpent, internalError, type ErrorType } from '../protocol/errors.js';
import type { BatchInput, ReadInput } from './input-reading.js';

// The built worker, from src/batches (tests) or dist/batches alike, as engine/prompt-counter.ts finds its own.
const WORKER_FILE = new URL('../../dist/batches/intake-worker.js', import.meta.url);

interface Answer {
  read?: ReadInput;
  refusal?: { status: number; type: ErrorType; message: string; code: string | null; param: string | null };
  failure?: string;
}

interface Job {
  account: string;
  input: BatchInput;
  resolve(read: ReadInput): void;
  reject(err: Error): void;
}

/** The most of the thread's time one account's inputs may take a minute, in ms. */
const READ_MS_PER_MINUTE = 15_000;
const MINUTE_MS = 60_000;

export class IntakeThread {
  private thread: Worker | undefined;
  private reading: { job: Job; startedAt: number } | undefined;
  /** Per account, its inputs waiting, in the order the accounts take their turns. */
  private readonly waiting = new Map<string, Job[]>();
  /** Per account, the thread's ms its inputs took in the current minute (`minute`: its number since the epoch). */
  private spent = new Map<string, number>();
  private minute = 0;

  /** `workerFile`: the thread's code (a test's may fail on cue); `readMsPerMinute`: each account's time on it. */
  constructor(
    private readonly workerFile: URL = WORKER_FILE,
    private readonly readMsPerMinute = READ_MS_PER_MINUTE,
  ) {}

  /**
   * Reads a batch's input on the thread: what is stored of it, or rejects with its 400 (or the 429 of an account
   * whose inputs took their time this minute). Each of `input.content`'s parts that is a buffer of its own is handed
   * over, and cannot be read here afterwards. An input still waiting when `gone` aborts (its client left) is dropped.
   */
  read(account: string, input: BatchInput, gone?: AbortSignal): Promise<ReadInput> {
    const overTime = this.overTime(account);
    if (overTime) return Promise.reject(overTime);
    return new Promise((resolve, reject) => {
      const job: Job = { account, input, resolve, reject };
      const line = this.waiting.get(account);
      if (line) line.push(job);
      else this.waiting.set(account, [job]);
      gone?.addEventListener('abort', () => this.drop(job), { once: true });
      this.next();
    });
  }

  /** Each account's ms on the thread this minute: the counts start again each minute. */
  private spentThisMinute(now: number): Map<string, number> {
    const minute = Math.floor(now / MINUTE_MS);
    if (minute !== this.minute) {
      this.minute = minute;
      this.spent = new Map();
    }
    return this.spent;
  }

  /** The 429 for an account whose inputs took READ_MS_PER_MINUTE of the thread this minute. */
  private overTime(account: string): ApiError | undefined {
    const now = Date.now();
    if ((this.spentThisMinute(now).get(account) ?? 0) < this.readMsPerMinute) return undefined;
    return intakeTimeSpent(this.readMsPerMinute / 1000, Math.ceil((MINUTE_MS - (now % MINUTE_MS)) / 1000));
  }

  /** Takes a waiting job out of the line, its client having left. */
  private drop(job: Job): void {
    const line = this.waiting.get(job.account);
    const at = line?.indexOf(job) ?? -1;
    if (at < 0) return;
    line!.splice(at, 1);
    if (line!.length === 0) this.waiting.delete(job.account);
    job.reject(new Cancelled());
  }

  /** Sends the next account's next input to the thread, where none is being read. */
  private next(): void {
    while (!this.reading) {
      const first = this.waiting.entries().next();
      if (first.done) return;
      const [account, line] = first.value;
      const job = line.shift()!;
      // Its account goes to the back of the line.
      this.waiting.delete(account);
      if (line.length > 0) this.waiting.set(account, line);
      // Inputs that waited while their account's earlier ones took its time are refused at their turn.
      const overTime = this.overTime(account);
      if (overTime) {
        job.reject(overTime);
        continue;
      }
      this.reading = { job, startedAt: Date.now() };
      // Handed over rather than copied (a copy of 32 MiB held the main thread 36 ms), each part that is a buffer of
      // its own and not a slice of Node's shared pool.
      const own = job.input.content.filter(({ buffer, byteOffset, byteLength }) => byteOffset === 0 && byteLength === buffer.byteLength && buffer instanceof ArrayBuffer);
      this.started().postMessage(job.input, own.map((part) => part.buffer as ArrayBuffer));
    }
  }

  private answered({ read, refusal, failure }: Answer): void {
    const reading = this.reading;
    this.reading = undefined;
    if (reading) {
      const { job, startedAt } = reading;
      const now = Date.now();
      const spent = this.spentThisMinute(now);
      spent.set(job.account, (spent.get(job.account) ?? 0) + now - startedAt);
      if (read) job.resolve(read);
      else if (refusal) job.reject(new ApiError(refusal.status, refusal.type, refusal.message, refusal.code, refusal.param));
      else {
        console.error(`parley: a batch's input could not be read: ${failure}`);
        job.reject(internalError());
      }
    }
    this.next();
  }

  private started(): Worker {
    if (this.thread) return this.thread;
    const worker = new Worker(this.workerFile);
    worker.on('message', (answer: Answer) => this.answered(answer));
    // A thread that dies fails the input it was reading; the next input starts another.
    worker.on('error', (err) => console.error(`parley: the batch intake thread failed: ${err.message}`));
    worker.on('exit', (code) => {
      this.thread = undefined;
      this.answered({ failure: `the batch intake thread stopped (exit code ${code})` });
    });
    // Unreferenced once its listeners are on (a 'message' listener would reference it again): an idle intake keeps no
    // process alive.
    worker.unref();
    this.thread = worker;
    return worker;
  }
}

/** The replica's intake. */
export const batchIntake = new IntakeThread();
