// A model's prompt counter, on a thread of its own. A count runs the chat
// template and the tokenizer over the whole conversation: 33 ms for 100 KB
// of text on this project's 2-core VM (an agent's turn carries that much),
// and on the main thread every other request waited it out. Here a count
// waits only for the counts queued before it; past MAX_QUEUED_BYTES of text
// queued, a prompt is not counted (its bytes bound it, as for a model
// without a tokenizer), so a flood of long prompts delays no other count
// by more than that much counting.
import { Worker } from 'node:worker_threads';
import type { CountedMessage } from './chat-prompt.js';

// The built worker, from src/engine (tests) or dist/engine alike, as engine/supervisor.ts finds the bin.
const WORKER_FILE = new URL('../../dist/engine/prompt-count-worker.js', import.meta.url);
/** About 170 ms of counting on this project's 2-core VM. */
const MAX_QUEUED_BYTES = 512 * 1024;
/** What a count weighs in the queue beside its text, the template's own work: empty prompts cannot queue without bound. */
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

export class PromptCounter {
  private worker: Worker | undefined;
  private readonly queued = new Map<number, Queued>();
  private queuedBytes = 0;
  private lastId = 0;

  private constructor(private readonly gguf: string, readonly maxTokenBytes: number) {}

  /** The counter of `gguf`'s model: rejects where the model cannot be loaded. */
  static async load(gguf: string): Promise<PromptCounter> {
    const { worker, maxTokenBytes } = await startWorker(gguf);
    const counter = new PromptCounter(gguf, maxTokenBytes);
    counter.use(worker);
    return counter;
  }

  /**
   * The conversation's tokens as the model sees them; undefined where it is
   * not counted now (MAX_QUEUED_BYTES are queued, or the thread failed).
   * `bytes`: its text's UTF-8 bytes.
   */
  count(messages: CountedMessage[], bytes: number): Promise<number | undefined> {
    if (!this.worker) return Promise.resolve(undefined);
    const weight = bytes + COUNT_OVERHEAD_BYTES;
    if (this.queuedBytes + weight > MAX_QUEUED_BYTES) return Promise.resolve(undefined);
    const id = ++this.lastId;
    this.queuedBytes += weight;
    this.worker.postMessage({ id, messages });
    return new Promise((counted) => this.queued.set(id, { bytes: weight, counted }));
  }

  private use(worker: Worker): void {
    this.worker = worker;
    worker.on('message', ({ id, tokens }: { id: number; tokens?: number }) => this.answer(id, tokens));
    // A thread that dies leaves this model's prompts bounded by their bytes from then on: the replica serves on,
    // and says so.
    worker.on('error', (err) => console.error(`parley: the prompt counter of ${this.gguf} failed, and prompts are bounded by their bytes from now on: ${err.message}`));
    worker.on('exit', () => {
      this.worker = undefined;
      for (const id of [...this.queued.keys()]) this.answer(id, undefined);
    });
  }

  private answer(id: number, tokens: number | undefined): void {
    const q = this.queued.get(id);
    if (!q) return;
    this.queued.delete(id);
    this.queuedBytes -= q.bytes;
    q.counted(tokens);
  }
}
