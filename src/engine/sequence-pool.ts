// The engine's context sequences, lent out per reply. A request gets the
// free sequences that serve it best: the longest prefix shared with its
// prompt (read from the KV cache, not recomputed), weighed against the cached
// tokens of another conversation it would overwrite, so that a new tenant
// takes an empty or stale sequence rather than a busy tenant's cache. Ties go
// to the sequence released longest ago.
import type { LlamaContext, LlamaContextSequence, Token } from 'node-llama-cpp';

interface Waiter {
  count: number;
  tokens: Token[];
  resolve: (seqs: LlamaContextSequence[]) => void;
}

export class SequencePool {
  private readonly free: LlamaContextSequence[] = [];
  private readonly waiters: Waiter[] = [];

  constructor(context: LlamaContext) {
    while (context.sequencesLeft > 0) this.free.push(context.getSequence());
  }

  get size(): number {
    return this.free.length;
  }

  acquire(tokens: Token[], count: number): Promise<LlamaContextSequence[]> {
    if (this.waiters.length === 0 && this.free.length >= count) return Promise.resolve(this.take(tokens, count));
    return new Promise((resolve) => this.waiters.push({ count, tokens, resolve }));
  }

  release(seqs: LlamaContextSequence[]): void {
    this.free.push(...seqs);
    while (this.waiters.length > 0 && this.free.length >= this.waiters[0].count) {
      const w = this.waiters.shift()!;
      w.resolve(this.take(w.tokens, w.count));
    }
  }

  private take(tokens: Token[], count: number): LlamaContextSequence[] {
    const ranked = this.free
      .map((seq) => {
        const shared = seq.compareContextTokens(tokens).firstDifferentIndex;
        const overwritten = seq.contextTokens.length - shared;
        return { seq, score: shared - overwritten / 2 };
      })
      .sort((a, b) => b.score - a.score)
      .slice(0, count)
      .map((r) => r.seq);
    for (const seq of ranked) this.free.splice(this.free.indexOf(seq), 1);
    return ranked;
  }
}
