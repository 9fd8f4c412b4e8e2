// A model's prompt counter, on threads of its own. A count runs the chat
// template and the tokenizer over the whole conversation: 33 ms for 100 KB
// of text on this project's 2-core VM (an agent's turn carries that much),
// and on the main thread every other request waited it out. Here a count
// waits only for the counts queued before it in its lane: short prompts
// have a thread of their own, so that none waits behind a long one's count.
// Past a lane's MAX_QUEUED_BYTES of text queued, a prompt is not counted
// (its bytes bound it, as for a model without a tokenizer), so a flood of
// prompts delays no other count by more than that much counting.
import { Worker } from 'node:worker_threads';
import type { CountedMessage } from './chat-prompt.js';

// The built worker, from src/engine (tests) or dist/engine alike, as engine/supervisor.ts finds the bin.
const WORKER_FILE = new URL('../../dist/engine/prompt-count-worker.js', import.meta.url);
/** Prompts of at most this much text are short: counted in a few ms at most, on the short lane's thread. */
const SHORT_PROMPT_BYTES = 16 * 1024;
/** The most text queued in each lane: about 170 ms of counting on this project's 2-core VM (long), 20 ms (short). */
const MAX_QUEUED_BYTES = { short: 64 * 1024, long: 512 * 1024 };
/** What a count weighs in its queue beside its text, the template's own work: empty prompts cannot queue without bound. */
const COUNT_OVERHEAD_BYTES = 1024;

interface Queued {
  /** Its weight in the queue. */
  bytes: number;
  counted(tokens: number | undefined): void;
}

/** Starts a worker on `gguf`; resolves once its model is loaded, rejects if it cannot be. */
function startWorker(gguf: string): Promise<{ worker: Worker; maxTokenBytes: number }> {
  const worker = new Worker(WORKER_FILE, { workerData: gguf });
  return new Promise((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (m: { maxTokenBytes: number }) => {
      worker.off('error', reject);
      // A counter idle in the background keeps no process alive.
      worker.unref();
      resolve({ worker, maxTokenBytes: m.maxTokenBytes });
    });
  });
}

/** One counting thread and the counts queued for it. */
class Lane {
  private worker: Worker | undefined;
  private readonly queued = new Map<number, Queued>();
  private queuedBytes = 0;
  private lastId = 0;

  constructor(worker: Worker, private readonly maxQueuedBytes: number, gguf: string) {
    this.worker = worker;
    worker.on('message', ({ id, tokens }: { id: number; tokens?: number }) => this.answer(id, tokens));
    // A thread that dies leaves its lane's prompts bounded by their bytes from then on: the replica serves on,
    // and says so.
    worker.on('error', (err) => console.error(`parley: a prompt counter of ${gguf} failed, and its prompts are bounded by their bytes from now on: ${err.message}`));
    worker.on('exit', () => {
      this.worker = undefined;
      for (const id of [...this.queued.keys()]) this.answer(id, undefined);
    });
  }

  count(messages: CountedMessage[], weight: number): Promise<number | undefined> {
    if (!this.worker || this.queuedBytes + weight > this.maxQueuedBytes) return Promise.resolve(undefined);
    const id = ++this.lastId;
    this.queuedBytes += weight;
    this.worker.postMessage({ id, messages });
    return new Promise((counted) => this.queued.set(id, { bytes: weight, counted }));
  }

  private answer(id: number, tokens: number | undefined): void {
    const q = this.queued.get(id);
    if (!q) return;
    this.queued.delete(id);
    this.queuedBytes -= q.bytes;
    q.counted(tokens);
  }
}

export class PromptCounter {
  private constructor(private readonly short: Lane, private readonly long: Lane, readonly maxTokenBytes: number) {}

  /** The counter of `gguf`'s model: rejects where the model cannot be loaded. */
  static async load(gguf: string): Promise<PromptCounter> {
    const [short, long] = await Promise.all([startWorker(gguf), startWorker(gguf)]);
    return new PromptCounter(new Lane(short.worker, MAX_QUEUED_BYTES.short, gguf), new Lane(long.worker, MAX_QUEUED_BYTES.long, gguf), short.maxTokenBytes);
  }

  /**
   * The conversation's tokens as the model sees them; undefined where it is
   * not counted now (its lane's queue is full, or its thread failed).
   * `bytes`: its text's UTF-8 bytes.
   */
  count(messages: CountedMessage[], bytes: number): Promise<number | undefined> {
    return (bytes <= SHORT_PROMPT_BYTES ? this.short : this.long).count(messages, bytes + COUNT_OVERHEAD_BYTES);
  }
}
