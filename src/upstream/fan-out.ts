// For upstreams that return one choice per call (llama.cpp, DeepSeek), a
// request for `n` replies becomes `n` calls; these merge their answers back
// into one reply whose choices are numbered 0..n-1.
import type { Completion, StreamEvent, Usage } from '../protocol/chat-response.js';

/** The prompt is counted once, as OpenAI does for `n`; every reply's tokens are counted. */
function combineUsage(parts: Usage[]): Usage {
  return {
    prompt_tokens: parts[0].prompt_tokens,
    completion_tokens: parts.reduce((sum, u) => sum + u.completion_tokens, 0),
    cached_tokens: Math.min(...parts.map((u) => u.cached_tokens)),
  };
}

export function mergeCompletions(parts: Completion[]): Completion {
  return {
    choices: parts.map((p, i) => ({ ...p.choices[0], index: i })),
    usage: combineUsage(parts.map((p) => p.usage)),
  };
}

export async function* mergeStreams(streams: AsyncGenerator<StreamEvent[]>[]): AsyncGenerator<StreamEvent[]> {
  const usage: (Usage | undefined)[] = streams.map(() => undefined);
  const pending = new Map(streams.map((s, i) => [i, s.next().then((r) => ({ i, r }))]));
  try {
    while (pending.size > 0) {
      const { i, r } = await Promise.race(pending.values());
      if (r.done) {
        pending.delete(i);
        continue;
      }
      pending.set(i, streams[i].next().then((next) => ({ i, r: next })));
      const out: StreamEvent[] = [];
      for (const event of r.value) {
        if (event.usage) usage[i] = event.usage;
        if (event.choices) out.push({ choices: event.choices.map((c) => ({ ...c, index: i })) });
        if (event.content) out.push({ content: { ...event.content, index: i } });
      }
      if (out.length > 0) yield out;
    }
  } finally {
    await Promise.allSettled(streams.map((s) => s.return(undefined)));
  }
  const known = usage.filter((u): u is Usage => u !== undefined);
  yield [known.length === usage.length ? { usage: combineUsage(known), done: true } : { done: true }];
}
