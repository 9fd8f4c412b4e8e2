// The engine's context sequences, lent out per reply. A request takes the
// free sequence that already holds the longest part of its prompt (read from
// the KV cache, not recomputed), as long as that keeps more of the
// sequence's content than it overwrites. Otherwise it takes an empty
// sequence, or the one released longest ago, so that a new conversation does
// not evict the cache of one that is still going on.
import type { LlamaContext, LlamaContextSequence, Token } from 'node-llama-cpp';

interface Waiter {
  count: number;
  tokens: Token[];
  resolve: (seqs: LlamaContextSequence[]) => void;
}

export class SequencePool {
  private readonly free: LlamaContextSequence[] = [];
  private readonly waiters: Waiter[] = [];
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

  acquire(tokens: Token[], count: number): Promise<LlamaContextSequence[]> {
    if (this.waiters.length === 0 && this.free.length >= count) return Promise.resolve(this.take(tokens, count));
    return new Promise((resolve) => this.waiters.push({ count, tokens, resolve }));
  }

  release(seqs: LlamaContextSequence[]): void {
    this.processing--;
    this.free.push(...seqs);
    while (this.waiters.length > 0 && this.free.length >= this.waiters[0].count) {
      const w = this.waiters.shift()!;
      w.resolve(this.take(w.tokens, w.count));
    }
  }

  private take(tokens: Token[], count: number): LlamaContextSequence[] {
    this.processing++;
    // `free` is in release order: index 0 was released longest ago.
    const ranked = this.free
      .map((seq, released) => {
        const shared = seq.compareContextTokens(tokens).firstDifferentIndex;
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
