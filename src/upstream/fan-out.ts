// One reply from several upstream calls: a batch of prompts is one call per
// prompt, and for upstreams that return one choice per call (llama.cpp,
// DeepSeek) a request for `n` replies is `n` calls per prompt. The calls are
// made prompt by prompt, so call k's choice j is the reply's choice
// k × choicesPerCall + j, as OpenAI numbers a batch's choices (prompt i's
// j-th reply is choice i × n + j).
import type { Completion, StreamEvent, Usage } from '../protocol/chat-response.js';

/** How a request's calls divide among its prompts and its choices. */
export interface FanOut {
  choicesPerCall: number;
  callsPerPrompt: number;
}

/** Each prompt is counted once, as OpenAI does for `n`; every reply's tokens are counted. */
function combineUsage(parts: Usage[], fanOut: FanOut): Usage {
  const usage: Usage = { prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0 };
  for (let first = 0; first < parts.length; first += fanOut.callsPerPrompt) {
    const prompt = parts.slice(first, first + fanOut.callsPerPrompt);
    usage.prompt_tokens += prompt[0].prompt_tokens;
    usage.cached_tokens += Math.min(...prompt.map((u) => u.cached_tokens));
  }
  for (const u of parts) usage.completion_tokens += u.completion_tokens;
  return usage;
}

export function mergeCompletions(parts: Completion[], fanOut: FanOut): Completion {
  return {
    choices: parts.flatMap((p, k) => p.choices.map((c) => ({ ...c, index: k * fanOut.choicesPerCall + c.index }))),
    usage: combineUsage(
      parts.map((p) => p.usage),
      fanOut,
    ),
  };
}

export async function* mergeStreams(streams: AsyncGenerator<StreamEvent[]>[], fanOut: FanOut): AsyncGenerator<StreamEvent[]> {
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
      const first = i * fanOut.choicesPerCall;
      const out: StreamEvent[] = [];
      for (const event of r.value) {
        if (event.usage) usage[i] = event.usage;
        if (event.choices) out.push({ choices: event.choices.map((c) => ({ ...c, index: first + c.index })) });
        if (event.content) out.push({ content: { ...event.content, index: first + event.content.index } });
      }
      if (out.length > 0) yield out;
    }
  } finally {
    await Promise.allSettled(streams.map((s) => s.return(undefined)));
  }
  const known = usage.filter((u): u is Usage => u !== undefined);
  yield [known.length === usage.length ? { usage: combineUsage(known, fanOut), done: true } : { done: true }];
}
