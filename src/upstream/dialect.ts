// The narrow interface every upstream kind implements, and the OpenAI-shaped
// base they share. A dialect knows its upstream's request quirks, usage
// fields, error bodies and stream quirks; nothing outside upstream/ does.
import type { ServiceTier } from '../protocol/service-tier.js';
import type { ChatCompletionRequest, OpenAiExtraField } from '../protocol/chat-request.js';
import type { CompletionRequest } from '../protocol/completions.js';
import type { EmbeddingsReply, EmbeddingsRequest } from '../protocol/embeddings.js';
import type { AssistantMessage, Choice, ChoiceDelta, Completion, StreamEvent, ToolCallFragment, Usage } from '../protocol/chat-response.js';
import { ApiError, contextLengthExceeded, upstreamFailed, upstreamRejected } from '../protocol/errors.js';
import { embeddingsInPlace, type EmbeddingsInPlace } from './embeddings-in-place.js';
import { quickEvents, type ChunkFraming } from './quick-events.js';
import { SseParser, type SseEvent } from './sse-parser.js';

export interface UpstreamTarget {
  upstreamModel: string;
  supportsTools: boolean;
  supportsJsonOutput: boolean;
  /** Engine extras the model's routing file passes through (its `passThrough`), as the client sent them. */
  passThrough: Record<string, unknown>;
}

/** The upstream broke its protocol or its stream: a failure of the model's server, not the caller. */
export class UpstreamBrokeOff extends Error {}

export interface Dialect {
  /** Whether one upstream call can return `n` choices; if not, the gateway fans out. */
  readonly multipleChoices: boolean;
  /** Where this upstream counts a chat prompt's tokens as its template makes them, if it can. */
  readonly promptCount?: PromptCount;
  /** The request priority this upstream schedules a tier's requests by, where it takes one (an endpoint opts in). */
  readonly priorityOf?: (tier: ServiceTier) => number;
  /** The JSON body sent upstream. Streaming calls always ask for usage, so Parley can meter. */
  requestBody(req: ChatCompletionRequest, target: UpstreamTarget): Record<string, unknown>;
  /** A whole (non-streamed) reply. Throws UpstreamBrokeOff when it is not one. */
  completion(body: unknown): Completion;
  /** A parser for one streamed reply's server-sent events; the events its quick path reads come out normalized. */
  streamParser(): SseParser;
  /** One event of a streamed reply. Throws UpstreamBrokeOff on an error event or a malformed one. */
  streamEvent(event: SseEvent): StreamEvent;
  /** What an upstream's non-2xx answer means to the caller. */
  error(status: number, bodyText: string): ApiError;
  /** The JSON body of a text completions call. Streaming calls always ask for usage, so Parley can meter. */
  completionsBody(req: CompletionRequest, target: UpstreamTarget): Record<string, unknown>;
  /** A whole text completion, normalized as chat's is: each choice's text as its message's content. */
  textCompletion(body: unknown): Completion;
  /** One event of a streamed text completion, each piece of text as a delta's content. */
  textStreamEvent(event: SseEvent): StreamEvent;
  /** The JSON body of an embeddings call. */
  embeddingsBody(req: EmbeddingsRequest, upstreamModel: string): Record<string, unknown>;
  /** An embeddings reply. Throws UpstreamBrokeOff when it is not one. */
  embeddings(body: unknown): EmbeddingsReply;
  /** An embeddings reply passed on with its vectors unread, where its shape allows; undefined sends it to `embeddings`. */
  embeddingsInPlace(body: Buffer, model: string, encoding: 'float' | 'base64'): EmbeddingsInPlace | undefined;
}

/** An upstream's own count of a chat prompt: where to ask, what to send, where the count is in the answer. */
export interface PromptCount {
  url(baseUrl: string): string;
  body(messages: ChatCompletionRequest['messages'], upstreamModel: string): Record<string, unknown>;
  read(answer: Record<string, any>): unknown;
}

export interface DialectQuirks {
  promptCount?: PromptCount;
  priorityOf?: (tier: ServiceTier) => number;
  multipleChoices?: boolean;
  /** OpenAI takes `developer` and `max_completion_tokens`; most servers want `system` and `max_tokens`. */
  openAiNativeParams?: boolean;
  /** Which of OpenAI's further fields this upstream takes; the others are not sent to it. */
  understands?: readonly OpenAiExtraField[];
  /** Extra fields for the upstream body. */
  extraBody?: (req: ChatCompletionRequest) => Record<string, unknown>;
  /** An upstream 5xx whose message shows that the request, not the server, was at fault: the caller gets a 400. */
  requestFaultMessage?: RegExp;
  /** The fields this upstream writes around every streamed chunk that say nothing; absent where its chunks are framed otherwise (no quick path). */
  chunkFraming?: ChunkFraming;
  /** Where this upstream says which stop string ended a choice (vLLM's `stop_reason`, SGLang's `matched_stop`). */
  matchedStop?: (choice: Record<string, any>) => unknown;
  /** Where this upstream reports cached prompt tokens. */
  cachedTokens: (usage: Record<string, any>, whole: Record<string, any>) => number | undefined;
}

type Json = Record<string, any>;

/** Reasoning under any of its names: DeepSeek's and SGLang's `reasoning_content`, newer vLLM's `reasoning`. */
const reasoningOf = (m: Json): string | undefined => {
  const text = typeof m.reasoning_content === 'string' ? m.reasoning_content : m.reasoning;
  return typeof text === 'string' && text !== '' ? text : undefined;
};

function assistantMessage(m: Json): AssistantMessage {
  const message: AssistantMessage = { role: 'assistant', content: typeof m.content === 'string' ? m.content : null };
  const reasoning = reasoningOf(m);
  if (reasoning !== undefined) message.reasoning_content = reasoning;
  if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) message.tool_calls = m.tool_calls;
  if (typeof m.refusal === 'string') message.refusal = m.refusal;
  return message;
}

/** A delta with OpenAI's fields only, none of them null: SGLang writes every field of its delta, null or not. */
function normalizedDelta(d: Json): ChoiceDelta['delta'] {
  const delta: ChoiceDelta['delta'] = {};
  if (d.role === 'assistant') delta.role = 'assistant';
  if (typeof d.content === 'string') delta.content = d.content;
  const reasoning = reasoningOf(d);
  if (reasoning !== undefined) delta.reasoning_content = reasoning;
  if (Array.isArray(d.tool_calls) && d.tool_calls.length > 0) delta.tool_calls = d.tool_calls.map(toolCallFragment);
  if (typeof d.refusal === 'string') delta.refusal = d.refusal;
  return delta;
}

/** Token logprobs in OpenAI's shape: llama.cpp adds each token's id, which OpenAI's have not. */
function logprobsOf(l: Json | null | undefined): Choice['logprobs'] {
  if (!l || typeof l !== 'object') return null;
  if (!Array.isArray(l.content)) return { content: null };
  const entry = (t: Json) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes ?? null });
  return { content: l.content.map((t: Json) => ({ ...entry(t), top_logprobs: Array.isArray(t.top_logprobs) ? t.top_logprobs.map(entry) : [] })) };
}

function toolCallFragment(t: Json, i: number): ToolCallFragment {
  const piece: ToolCallFragment = { index: typeof t.index === 'number' ? t.index : i };
  if (typeof t.id === 'string') piece.id = t.id;
  if (typeof t.type === 'string') piece.type = t.type;
  const fn: NonNullable<ToolCallFragment['function']> = {};
  if (typeof t.function?.name === 'string') fn.name = t.function.name;
  if (typeof t.function?.arguments === 'string') fn.arguments = t.function.arguments;
  piece.function = fn;
  return piece;
}

const asInt = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : 0);

const CONTEXT_ERROR = /context length|context window|context size|maximum context|too many tokens|exceeds the available context/i;

export const openAiCachedTokens = (u: Json) => u.prompt_tokens_details?.cached_tokens;

export function openAiCompatible(quirks: DialectQuirks): Dialect {
  const quick = quirks.chunkFraming && quickEvents(quirks.chunkFraming);
  const readUsage = (whole: Json): Usage | undefined => {
    const u = whole.usage;
    if (!u || typeof u !== 'object') return undefined;
    const prompt = asInt(u.prompt_tokens);
    const usage: Usage = {
      prompt_tokens: prompt,
      completion_tokens: asInt(u.completion_tokens),
      cached_tokens: Math.min(prompt, asInt(quirks.cachedTokens(u, whole))),
    };
    const reasoning = u.completion_tokens_details?.reasoning_tokens;
    if (typeof reasoning === 'number') usage.reasoning_tokens = asInt(reasoning);
    return usage;
  };

  /** `choice` with the stop string that ended it, where this upstream says one did. */
  const withMatchedStop = <C extends Choice | ChoiceDelta>(c: Json, choice: C): C => {
    const stop = c.finish_reason === 'stop' ? quirks.matchedStop?.(c) : undefined;
    if (typeof stop === 'string') choice.matched_stop = stop;
    return choice;
  };

  const parse = (text: string): Json => {
    try {
      const v = JSON.parse(text);
      if (v && typeof v === 'object') return v;
    } catch {
      // handled below
    }
    throw new UpstreamBrokeOff('the upstream sent a malformed event');
  };

  const errorMessage = (body: Json | undefined): string | undefined => {
    const e = body?.error ?? body;
    return typeof e === 'string' ? e : typeof e?.message === 'string' ? e.message : undefined;
  };

  /** One streamed event, its choices read by `choiceOf`: chat's deltas, or a text completion's text. */
  const eventWith = (event: SseEvent, choiceOf: (c: Json) => Pick<ChoiceDelta, 'delta' | 'logprobs'>): StreamEvent => {
    if (event.data === '[DONE]') return { done: true };
    const body = parse(event.data);
    if (event.event === 'error' || body.error !== undefined || body.object === 'error') {
      throw new UpstreamBrokeOff(`the upstream sent an error event: ${errorMessage(body) ?? 'no message'}`);
    }
    const out: StreamEvent = {};
    if (Array.isArray(body.choices) && body.choices.length > 0) {
      out.choices = body.choices.map((c: Json, i: number): ChoiceDelta => withMatchedStop(c, {
        index: typeof c.index === 'number' ? c.index : i,
        ...choiceOf(c),
        finish_reason: c.finish_reason ?? null,
      }));
    }
    const usage = readUsage(body);
    if (usage) out.usage = usage;
    return out;
  };

  return {
    multipleChoices: quirks.multipleChoices ?? true,
    promptCount: quirks.promptCount,
    priorityOf: quirks.priorityOf,

    requestBody(req, target) {
      const native = quirks.openAiNativeParams ?? false;
      const maxTokens = req.max_completion_tokens ?? req.max_tokens;
      const body: Record<string, unknown> = {
        model: target.upstreamModel,
        messages: native ? req.messages : req.messages.map((m) => (m.role === 'developer' ? { ...m, role: 'system' } : m)),
        ...(maxTokens != null ? { [native ? 'max_completion_tokens' : 'max_tokens']: maxTokens } : {}),
      };
      for (const key of ['temperature', 'top_p', 'stop', 'seed', 'n', 'presence_penalty', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs'] as const) {
        if (req[key] != null) body[key] = req[key];
      }
      if (target.supportsTools) {
        for (const key of ['tools', 'tool_choice', 'parallel_tool_calls'] as const) if (req[key] != null) body[key] = req[key];
      }
      if (target.supportsJsonOutput && req.response_format != null) body.response_format = req.response_format;
      for (const key of quirks.understands ?? []) if (req[key] != null) body[key] = req[key];
      Object.assign(body, target.passThrough);
      if (req.stream) {
        body.stream = true;
        body.stream_options = { include_usage: true };
      }
      // Added in place: a spread copies the body again, slowly in V8 (Node 20), on every request.
      return Object.assign(body, quirks.extraBody?.(req));
    },

    completion(raw) {
      const body = raw as Json;
      if (!body || !Array.isArray(body.choices)) throw new UpstreamBrokeOff('the upstream reply has no choices');
      const choices: Choice[] = body.choices.map((c: Json, i: number) => withMatchedStop(c, {
        index: typeof c.index === 'number' ? c.index : i,
        message: assistantMessage(c.message ?? {}),
        logprobs: logprobsOf(c.logprobs),
        finish_reason: c.finish_reason ?? 'stop',
      }));
      const usage = readUsage(body);
      if (!usage) throw new UpstreamBrokeOff('the upstream reply has no usage');
      return { choices, usage };
    },

    streamParser() {
      return new SseParser(quick);
    },

    streamEvent: (event) => eventWith(event, (c) => ({ delta: normalizedDelta(c.delta ?? {}), logprobs: logprobsOf(c.logprobs) })),

    completionsBody(req, target) {
      const body: Record<string, unknown> = { model: target.upstreamModel, prompt: req.prompt };
      for (const key of ['suffix', 'echo', 'logprobs', 'max_tokens', 'n', 'stop', 'temperature', 'top_p', 'seed', 'presence_penalty', 'frequency_penalty', 'logit_bias'] as const) {
        if (req[key] != null) body[key] = req[key];
      }
      if (req.user != null && quirks.understands?.includes('user')) body.user = req.user;
      Object.assign(body, target.passThrough);
      if (req.stream) {
        body.stream = true;
        body.stream_options = { include_usage: true };
      }
      return body;
    },

    textCompletion(raw) {
      const body = raw as Json;
      if (!body || !Array.isArray(body.choices)) throw new UpstreamBrokeOff('the upstream reply has no choices');
      const usage = readUsage(body);
      if (!usage) throw new UpstreamBrokeOff('the upstream reply has no usage');
      const choices: Choice[] = body.choices.map((c: Json, i: number) => ({
        index: typeof c.index === 'number' ? c.index : i,
        message: { role: 'assistant', content: typeof c.text === 'string' ? c.text : '' },
        logprobs: c.logprobs ?? null,
        finish_reason: c.finish_reason ?? 'stop',
      }));
      return { choices, usage };
    },

    textStreamEvent: (event) => eventWith(event, (c) => ({ delta: { content: typeof c.text === 'string' ? c.text : '' }, logprobs: c.logprobs ?? null })),

    embeddingsBody(req, upstreamModel) {
      const body: Record<string, unknown> = { model: upstreamModel, input: req.input };
      if (req.encoding_format != null) body.encoding_format = req.encoding_format;
      if (req.dimensions != null) body.dimensions = req.dimensions;
      if (req.user != null && quirks.understands?.includes('user')) body.user = req.user;
      return body;
    },

    embeddings(raw) {
      const body = raw as Json;
      if (!body || !Array.isArray(body.data)) throw new UpstreamBrokeOff('the upstream reply has no embeddings');
      const data = body.data.map((d: Json, i: number) => {
        if (!Array.isArray(d?.embedding) && typeof d?.embedding !== 'string') throw new UpstreamBrokeOff('an embedding of the upstream reply is neither numbers nor base64');
        return { index: typeof d.index === 'number' ? d.index : i, embedding: d.embedding };
      });
      if (!body.usage || typeof body.usage !== 'object') throw new UpstreamBrokeOff('the upstream reply has no usage');
      return { data, promptTokens: asInt(body.usage.prompt_tokens) };
    },

    embeddingsInPlace,

    error(status, bodyText) {
      let body: Json | undefined;
      try {
        body = JSON.parse(bodyText);
      } catch {
        body = undefined;
      }
      const message = errorMessage(body) ?? (bodyText.slice(0, 300) || `HTTP ${status}`);
      const e = body?.error ?? body ?? {};
      const isContext =
        e.type === 'exceed_context_size_error' || e.code === 'context_length_exceeded' || ((status === 400 || status === 413) && CONTEXT_ERROR.test(message));
      if (isContext) return contextLengthExceeded(`The prompt plus max_tokens exceed this model's context window (upstream said: ${message}).`);
      if (status >= 400 && status < 500 && status !== 408 && status !== 429) {
        return upstreamRejected(status === 404 ? 400 : status, message, typeof e.param === 'string' ? e.param : null);
      }
      if (status >= 500 && quirks.requestFaultMessage?.test(message)) return upstreamRejected(400, `The model's server could not read this request: ${message}`, null);
      return upstreamFailed(`HTTP ${status}: ${message}`, status);
    },
  };
}
