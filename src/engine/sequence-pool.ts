// The engine's context sequences, lent out per reply. A request takes the
// free sequence that already holds the longest part of its prompt (read from
// the KV cache, not recomputed), as long as that keeps more of the
// sequence's content than it overwrites. Otherwise it takes an empty
// sequence, or the one released longest ago, so that a new conversation does
// not evict the cache of one that is still going on. A sequence is read from
// only by a request with the `cache_salt` of the one that last filled it (as
// vLLM keeps salted blocks apart); another's finds it emptied first.
import type { LlamaContext, LlamaContextSequence, Token } from 'node-llama-cpp';

interface Waiter {
  count: number;
  tokens: Token[];
  salt: string;
  resolve: (seqs: LlamaContextSequence[]) => void;
}

export class SequencePool {
  private readonly free: LlamaContextSequence[] = [];
  private readonly waiters: Waiter[] = [];
  /** The salt of the request each sequence last served. */
  private readonly salts = new WeakMap<LlamaContextSequence, string>();
  /** Requests holding sequences now: the engine's load, with `waiting`, as its /metrics reports it. */
  processing = 0;

  constructor(context: LlamaContext) {
    while (context.sequencesLeft > 0) this.free.push(context.getSequence());
  }

  get size(): number {
    return this.free.length;
  }

  /** Requests waiting for a sequence. */
  get waiting(): number {
    return this.waiters.length;
  }

  async acquire(tokens: Token[], count: number, salt: string): Promise<LlamaContextSequence[]> {
    const seqs = this.waiters.length === 0 && this.free.length >= count ? this.take(tokens, count, salt) : await new Promise<LlamaContextSequence[]>((resolve) => this.waiters.push({ count, tokens, salt, resolve }));
    try {
      for (const seq of seqs) {
        if (this.saltOf(seq) !== salt) await seq.clearHistory();
        this.salts.set(seq, salt);
      }
    } catch (err) {
      this.release(seqs);
      throw err;
    }
    return seqs;
  }

  private saltOf(seq: LlamaContextSequence): string {
    return this.salts.get(seq) ?? '';
  }

  release(seqs: LlamaContextSequence[]): void {
    this.processing--;
    this.free.push(...seqs);
    while (this.waiters.length > 0 && this.free.length >= this.waiters[0].count) {
      const w = this.waiters.shift()!;
      w.resolve(this.take(w.tokens, w.count, w.salt));
    }
  }

  private take(tokens: Token[], count: number, salt: string): LlamaContextSequence[] {
    this.processing++;
    // `free` is in release order: index 0 was released longest ago.
    const ranked = this.free
      .map((seq, released) => {
        const shared = this.saltOf(seq) === salt ? seq.compareContextTokens(tokens).firstDifferentIndex : 0;
        const held = seq.contextTokens.length;
        return { seq, released, shared: shared > 0 && shared >= held - shared ? shared : 0, empty: held === 0 };
      })
      .sort((a, b) => b.shared - a.shared || Number(b.empty) - Number(a.empty) || a.released - b.released)
      .slice(0, count)
      .map((r) => r.seq);
    for (const seq of ranked) this.free.splice(this.free.indexOf(seq), 1);
    return ranked;
  }
}
