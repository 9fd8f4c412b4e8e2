// The Chat Completions request (SPEC 4.1) as a zod schema that is also its
// TypeScript type. zod drops keys it does not know, which is exactly the
// spec's rule for unknown fields: accepted, and never sent upstream.
import { z } from 'zod';
import type { ApiError } from './errors.js';
import { fewKeys, parseRequest, textRefusal } from './request-parsing.js';
import { textProblemOf } from './well-formed-text.js';

const MAX_CHOICES = 4;

/** The most token ids a `logit_bias` may name: lists of banned tokens run to a few hundred. */
const MAX_LOGIT_BIAS = 1024;

/**
 * The longest stop string, and the most of them a Messages request may send (OpenAI's APIs take 4). An engine
 * looks for every one in the tail of every token it writes, so a request of a million, or of one of 4 MB, would
 * slow the engine for every tenant it serves.
 */
const MAX_STOP_CHARS = 1024;
export const MAX_STOP_SEQUENCES = 64;
export const stopString = z.string().max(MAX_STOP_CHARS);

/** OpenAI's `stop`, of Chat Completions and Completions alike. */
export const stopStrings = z.union([stopString, z.array(stopString).max(4)], { error: `expected a string or an array of at most 4 strings, each of at most ${MAX_STOP_CHARS} characters` });

/** OpenAI's `logit_bias`, of Chat Completions and Completions alike. */
export const logitBias = fewKeys(MAX_LOGIT_BIAS, `expected at most ${MAX_LOGIT_BIAS} token ids`, z.record(z.string().regex(/^\d+$/, 'keys must be token ids'), z.number().min(-100).max(100)));

// A union that fails says only "Invalid input": these say what is accepted.
const textPart = z.object({ type: z.literal('text'), text: z.string() });
const content = z.union([z.string(), z.array(textPart).min(1)], {
  error: 'expected a string, or a non-empty array of text parts ({"type": "text", "text": "..."}); models here take text only',
});

const toolCall = z.looseObject({
  id: z.string(),
  type: z.literal('function'),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

const message = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content, name: z.string().optional() }),
  z.object({ role: z.literal('developer'), content, name: z.string().optional() }),
  z.object({ role: z.literal('user'), content, name: z.string().optional() }),
  z.object({
    role: z.literal('assistant'),
    content: content.nullish(),
    name: z.string().optional(),
    tool_calls: z.array(toolCall).optional(),
  }),
  z.object({ role: z.literal('tool'), content, tool_call_id: z.string() }),
]);

const penalty = z.number().min(-2).max(2).nullish();

export const chatCompletionRequest = z
  .object({
    model: z.string().min(1),
    messages: z.array(message).min(1),
    max_tokens: z.int().min(1).nullish(),
    max_completion_tokens: z.int().min(1).nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    stop: stopStrings.nullish(),
    seed: z.int().nullish(),
    n: z.int().min(1).max(MAX_CHOICES).nullish(),
    presence_penalty: penalty,
    frequency_penalty: penalty,
    logit_bias: logitBias.nullish(),
    logprobs: z.boolean().nullish(),
    top_logprobs: z.int().min(0).max(20).nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_usage: z.boolean().optional(), include_obfuscation: z.boolean().optional() }).nullish(),
    tools: z.array(z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string() }) })).nullish(),
    tool_choice: z
      .union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.literal('function') })], {
        error: 'expected "none", "auto", "required" or {"type": "function", "function": {"name": "..."}}',
      })
      .nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    response_format: z.looseObject({ type: z.enum(['text', 'json_object', 'json_schema']) }).nullish(),
    // The rest of OpenAI's reference. Each goes on to the upstream kinds that take it (upstream/dialects/).
    user: z.string().max(256).nullish(),
    safety_identifier: z.string().max(64).nullish(),
    reasoning_effort: z.enum(['none', 'minimal', 'low', 'medium', 'high']).nullish(),
    verbosity: z.enum(['low', 'medium', 'high']).nullish(),
    metadata: z
      .record(z.string().max(64), z.string().max(512))
      .refine((m) => Object.keys(m).length <= 16, 'at most 16 pairs')
      .nullish(),
    service_tier: z.enum(['auto', 'default', 'flex', 'scale', 'priority']).nullish(),
    store: z.boolean().nullish(),
    prediction: z.object({ type: z.literal('content'), content }).nullish(),
    modalities: z.array(z.enum(['text', 'audio'])).nullish(),
    audio: z.looseObject({ voice: z.union([z.string(), z.looseObject({ id: z.string() })]), format: z.string() }).nullish(),
    web_search_options: z.looseObject({ search_context_size: z.enum(['low', 'medium', 'high']).optional(), user_location: z.looseObject({}).nullish() }).nullish(),
    prompt_cache_key: z.string().max(1024).nullish(),
    prompt_cache_retention: z.enum(['in-memory', '24h']).nullish(),
  })
  .check((ctx) => {
    if (ctx.value.top_logprobs != null && ctx.value.logprobs !== true) {
      ctx.issues.push({
        code: 'custom',
        input: ctx.value.top_logprobs,
        path: ['top_logprobs'],
        message: '`top_logprobs` requires `logprobs` to be true',
      });
    }
  });

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequest>;

/** The fields of OpenAI's reference beyond the spec's; each upstream kind takes some of them (upstream/dialects/). */
export const OPENAI_EXTRA_FIELDS = [
  'user', 'safety_identifier', 'reasoning_effort', 'verbosity', 'metadata', 'store', 'prediction',
  'modalities', 'audio', 'web_search_options', 'prompt_cache_key', 'prompt_cache_retention',
] as const;
export type OpenAiExtraField = (typeof OPENAI_EXTRA_FIELDS)[number];
export type ChatMessage = ChatCompletionRequest['messages'][number];

export function parseChatCompletionRequest(body: unknown): ChatCompletionRequest | ApiError {
  return parseRequest(chatCompletionRequest, body);
}

/**
 * The fields named in a model's `passThrough` (engine extras such as top_k or
 * chat_template_kwargs), taken as the client sent them; 400 for text in them
 * that is not valid Unicode or nests too deep. Fields not named stay unknown: never sent on.
 */
export function passThroughFields(body: unknown, names: readonly string[]): Record<string, unknown> | ApiError {
  const picked: Record<string, unknown> = {};
  const fields = body as Record<string, unknown>;
  for (const name of names) if (fields[name] !== undefined && fields[name] !== null) picked[name] = fields[name];
  const problem = textProblemOf(picked);
  return problem ? textRefusal(problem) : picked;
}

export function messageText(m: Pick<ChatMessage, 'content'>): string {
  if (m.content == null) return '';
  return typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('');
}

/** The reply cap the client asked for, under either of its names. */
export function requestedMaxTokens(req: ChatCompletionRequest): number | undefined {
  return req.max_completion_tokens ?? req.max_tokens ?? undefined;
}
