// OpenAI's legacy Completions API (`POST /v1/completions`), which editors use
// for code completion (`suffix` for fill-in-the-middle): the request as a
// zod schema that is also its type, and its replies, whole or as
// `text_completion` chunks. Replies are normalized as chat's are
// (chat-response.ts: a choice's text is its message's content), so that
// the dialects, the fan-out and the stream relay serve both APIs.
import { z } from 'zod';
import { OpenAiChunks, sseData, usageBody, type ChoiceDelta, type Completion, type ReplyIdentity } from './chat-response.js';
import type { ApiError } from './errors.js';
import { logitBias, stopStrings } from './chat-request.js';
import { parseRequest, tokenIds } from './request-parsing.js';

const penalty = z.number().min(-2).max(2).nullish();

/** The most prompts one request may carry: each becomes its own upstream call (or `n` of them). */
export const MAX_PROMPTS = 32;
const PROMPT_SHAPES = `expected a string, an array of strings, token ids or an array of token id arrays (at most ${MAX_PROMPTS} prompts)`;

export const completionRequest = z.object({
  model: z.string().min(1),
  prompt: z.union([z.string(), tokenIds, z.array(z.string()).min(1).max(MAX_PROMPTS), z.array(tokenIds).min(1).max(MAX_PROMPTS)], { error: PROMPT_SHAPES }),
  suffix: z.string().nullish(),
  echo: z.boolean().nullish(),
  logprobs: z.int().min(0).max(5).nullish(),
  max_tokens: z.int().min(1).nullish(),
  n: z.int().min(1).max(4).nullish(),
  stop: stopStrings.nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  seed: z.int().nullish(),
  presence_penalty: penalty,
  frequency_penalty: penalty,
  logit_bias: logitBias.nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
  user: z.string().max(256).nullish(),
  service_tier: z.string().max(64).nullish(),
  prompt_cache_key: z.string().max(1024).nullish(),
});

export type CompletionRequest = z.infer<typeof completionRequest>;

export function parseCompletionRequest(body: unknown): CompletionRequest | ApiError {
  return parseRequest(completionRequest, body);
}

export type Prompt = string | number[];

/** The request's prompts, each its text or its token ids: one, or a batch. */
export function promptsOf(request: CompletionRequest): Prompt[] {
  const p = request.prompt;
  if (typeof p === 'string') return [p];
  if (typeof p[0] === 'number') return [p as number[]];
  return p as Prompt[];
}

export function renderTextCompletion(identity: ReplyIdentity, completion: Completion) {
  return {
    id: identity.id,
    object: 'text_completion',
    created: identity.created,
    model: identity.model,
    service_tier: identity.serviceTier,
    choices: completion.choices.map((c) => ({ text: c.message.content ?? '', index: c.index, logprobs: c.logprobs, finish_reason: c.finish_reason })),
    usage: usageBody(completion.usage),
  };
}

/**
 * A streamed reply's `text_completion` chunks: a chunk per piece of text, then each choice's finish, the usage chunk
 * when asked for, and [DONE]. Choices keep the upstream's index (chat's are numbered as they come): for a batch of
 * prompts, the index says which prompt a reply is for.
 */
export class TextChunkRenderer extends OpenAiChunks {
  constructor(identity: ReplyIdentity, includeUsage: boolean) {
    super(`{"id":${JSON.stringify(identity.id)},"object":"text_completion","created":${identity.created},"model":${JSON.stringify(identity.model)},"service_tier":${JSON.stringify(identity.serviceTier)},"choices":`, includeUsage);
  }

  deltas(choices: ChoiceDelta[]): string {
    let out = '';
    for (const c of choices) {
      this.noteChoice(c);
      const text = c.delta.content ?? '';
      if (text === '' && c.finish_reason === null && c.logprobs === null) continue;
      out += sseData(this.prefix + JSON.stringify([{ text, index: c.index, logprobs: c.logprobs, finish_reason: c.finish_reason }]) + this.suffix);
    }
    return out;
  }

  protected stopped(index: number): string {
    return `[{"text":"","index":${index},"logprobs":null,"finish_reason":"stop"}]`;
  }
}
