// An OpenAI-compatible upstream's replies read into Parley's one event
// sequence: whole replies, streamed events, embeddings and error answers.
// This code knows OpenAI's format, read leniently (fields it does not name
// are dropped, null ones skipped); what an upstream does differently is
// named by its dialect's ReplyQuirks.
import type { EmbeddingsReply } from '../protocol/embeddings.js';
import type { AssistantMessage, Choice, ChoiceDelta, Completion, StreamEvent, ToolCall, ToolCallFragment, Usage } from '../protocol/chat-response.js';
import { ApiError, contextLengthExceeded, upstreamFailed, upstreamRejected } from '../protocol/errors.js';
import type { SseEvent } from './sse-parser.js';
import { UpstreamBrokeOff } from './upstream-broke-off.js';

type Json = Record<string, any>;

export interface ReplyQuirks {
  /** Where this upstream reports cached prompt tokens, if not in OpenAI's field. */
  cachedTokens?: (usage: Json, whole: Json) => number | undefined;
  /** Where this upstream writes a message's reasoning, if not as `reasoning_content` (DeepSeek's name, which Parley's replies use). */
  reasoning?: (message: Json) => unknown;
  /** Where this upstream says which stop string ended a choice. */
  matchedStop?: (choice: Json) => unknown;
  /** A streamed event that is an error in a shape of this upstream's own, besides OpenAI's `error` field. */
  isErrorEvent?: (body: Json) => boolean;
  /** An upstream error that says the context was exceeded in a way of its own, besides OpenAI's code and the usual wording. */
  isContextError?: (error: Json) => boolean;
  /** An upstream 5xx whose message shows that the request, not the server, was at fault: the caller gets a 400. */
  requestFaultMessage?: RegExp;
}

export const openAiCachedTokens = (usage: Json): number | undefined => usage.prompt_tokens_details?.cached_tokens;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null;
/**
 * The objects of a list an upstream sent. A model's output is steered by a tenant's prompt, and an engine's bugs are
 * anyone's: a null or a number where an object goes is passed over, not a failure of the gateway.
 */
const objectsIn = (list: unknown): Json[] => (Array.isArray(list) ? list.filter(isObject) : []);

const asInt = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : 0);

function reasoningOf(m: Json, quirks: ReplyQuirks): string | undefined {
  const text = quirks.reasoning ? quirks.reasoning(m) : m.reasoning_content;
  return typeof text === 'string' && text !== '' ? text : undefined;
}

function assistantMessage(m: Json, quirks: ReplyQuirks): AssistantMessage {
  const message: AssistantMessage = { role: 'assistant', content: typeof m.content === 'string' ? m.content : null };
  const reasoning = reasoningOf(m, quirks);
  if (reasoning !== undefined) message.reasoning_content = reasoning;
  const calls = objectsIn(m.tool_calls).map(toolCall);
  if (calls.length > 0) message.tool_calls = calls;
  if (typeof m.refusal === 'string') message.refusal = m.refusal;
  return message;
}

function delta(d: Json, quirks: ReplyQuirks): ChoiceDelta['delta'] {
  const out: ChoiceDelta['delta'] = {};
  if (d.role === 'assistant') out.role = 'assistant';
  if (typeof d.content === 'string') out.content = d.content;
  const reasoning = reasoningOf(d, quirks);
  if (reasoning !== undefined) out.reasoning_content = reasoning;
  const calls = objectsIn(d.tool_calls);
  if (calls.length > 0) out.tool_calls = calls.map(toolCallFragment);
  if (typeof d.refusal === 'string') out.refusal = d.refusal;
  return out;
}

/** A call's arguments as OpenAI writes them, a string of JSON: some servers send the object itself. */
const argumentsOf = (args: unknown): string | undefined => (typeof args === 'string' ? args : isObject(args) ? JSON.stringify(args) : undefined);

function toolCall(t: Json): ToolCall {
  const fn = isObject(t.function) ? t.function : {};
  const call: ToolCall = { type: typeof t.type === 'string' ? t.type : 'function', function: { name: typeof fn.name === 'string' ? fn.name : '', arguments: argumentsOf(fn.arguments) ?? '' } };
  if (typeof t.id === 'string') call.id = t.id;
  return call;
}

function toolCallFragment(t: Json, i: number): ToolCallFragment {
  const piece: ToolCallFragment = { index: typeof t.index === 'number' ? t.index : i };
  if (typeof t.id === 'string') piece.id = t.id;
  if (typeof t.type === 'string') piece.type = t.type;
  const fn: NonNullable<ToolCallFragment['function']> = {};
  if (typeof t.function?.name === 'string') fn.name = t.function.name;
  const args = argumentsOf(t.function?.arguments);
  if (args !== undefined) fn.arguments = args;
  piece.function = fn;
  return piece;
}

function logprobsOf(l: Json | null | undefined): Choice['logprobs'] {
  if (!isObject(l)) return null;
  if (!Array.isArray(l.content)) return { content: null };
  const entry = (t: Json) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes ?? null });
  return { content: objectsIn(l.content).map((t) => ({ ...entry(t), top_logprobs: objectsIn(t.top_logprobs).map(entry) })) };
}

function usageOf(whole: Json, quirks: ReplyQuirks): Usage | undefined {
  const u = whole.usage;
  if (!isObject(u)) return undefined;
  const prompt = asInt(u.prompt_tokens);
  const usage: Usage = {
    prompt_tokens: prompt,
    completion_tokens: asInt(u.completion_tokens),
    cached_tokens: Math.min(prompt, asInt((quirks.cachedTokens ?? openAiCachedTokens)(u, whole))),
  };
  const reasoning = u.completion_tokens_details?.reasoning_tokens;
  if (typeof reasoning === 'number') usage.reasoning_tokens = asInt(reasoning);
  return usage;
}

/** `choice` with the stop string that ended it, where the upstream says one did. */
function withMatchedStop<C extends Choice | ChoiceDelta>(c: Json, choice: C, quirks: ReplyQuirks): C {
  const stop = c.finish_reason === 'stop' ? quirks.matchedStop?.(c) : undefined;
  if (typeof stop === 'string') choice.matched_stop = stop;
  return choice;
}

/** Why a choice ended, where the upstream says: a whole reply's choice that does not say ended with 'stop'. */
const finishOf = (c: Json): string | null => (typeof c.finish_reason === 'string' && c.finish_reason !== '' ? c.finish_reason : null);

const indexOf = (c: Json, i: number): number => (typeof c.index === 'number' ? c.index : i);

/** A whole reply's choices, each read by `messageOf`, and its usage. */
function wholeReply(raw: unknown, quirks: ReplyQuirks, choiceOf: (c: Json, i: number) => Choice): Completion {
  const body = raw as Json;
  const choices = isObject(body) ? objectsIn(body.choices) : [];
  if (choices.length === 0) throw new UpstreamBrokeOff('the upstream reply has no choices');
  const usage = usageOf(body, quirks);
  if (!usage) throw new UpstreamBrokeOff('the upstream reply has no usage');
  return { choices: choices.map(choiceOf), usage };
}

export const chatReply = (raw: unknown, quirks: ReplyQuirks): Completion =>
  wholeReply(raw, quirks, (c, i) =>
    withMatchedStop(c, { index: indexOf(c, i), message: assistantMessage(isObject(c.message) ? c.message : {}, quirks), logprobs: logprobsOf(c.logprobs), finish_reason: finishOf(c) ?? 'stop' }, quirks),
  );

/** A text completion, normalized as chat's is: each choice's text as its message's content. */
export const textReply = (raw: unknown, quirks: ReplyQuirks): Completion =>
  wholeReply(raw, quirks, (c, i) => ({
    index: indexOf(c, i),
    message: { role: 'assistant', content: typeof c.text === 'string' ? c.text : '' },
    logprobs: c.logprobs ?? null,
    finish_reason: finishOf(c) ?? 'stop',
  }));

function parseEvent(text: string): Json {
  try {
    const v = JSON.parse(text);
    if (v && typeof v === 'object') return v;
  } catch {
    // handled below
  }
  throw new UpstreamBrokeOff('the upstream sent a malformed event');
}

function errorMessage(body: Json | undefined): string | undefined {
  const e = body?.error ?? body;
  return typeof e === 'string' ? e : typeof e?.message === 'string' ? e.message : undefined;
}

/** One streamed event, its choices read by `choiceOf`: chat's deltas, or a text completion's text. */
function streamedEvent(event: SseEvent, quirks: ReplyQuirks, choiceOf: (c: Json) => Pick<ChoiceDelta, 'delta' | 'logprobs'>): StreamEvent {
  if (event.data === '[DONE]') return { done: true };
  const body = parseEvent(event.data);
  if (event.event === 'error' || body.error !== undefined || quirks.isErrorEvent?.(body)) {
    throw new UpstreamBrokeOff(`the upstream sent an error event: ${errorMessage(body) ?? 'no message'}`);
  }
  const out: StreamEvent = {};
  const choices = objectsIn(body.choices);
  if (choices.length > 0) {
    out.choices = choices.map((c, i): ChoiceDelta => withMatchedStop(c, { index: indexOf(c, i), ...choiceOf(c), finish_reason: finishOf(c) }, quirks));
  }
  const usage = usageOf(body, quirks);
  if (usage) out.usage = usage;
  return out;
}

export const chatEvent = (event: SseEvent, quirks: ReplyQuirks): StreamEvent =>
  streamedEvent(event, quirks, (c) => ({ delta: delta(isObject(c.delta) ? c.delta : {}, quirks), logprobs: logprobsOf(c.logprobs) }));

/** One event of a streamed text completion, each piece of text as a delta's content. */
export const textEvent = (event: SseEvent, quirks: ReplyQuirks): StreamEvent =>
  streamedEvent(event, quirks, (c) => ({ delta: { content: typeof c.text === 'string' ? c.text : '' }, logprobs: c.logprobs ?? null }));

export function embeddingsReply(raw: unknown): EmbeddingsReply {
  const body = raw as Json;
  if (!body || !Array.isArray(body.data)) throw new UpstreamBrokeOff('the upstream reply has no embeddings');
  const data = body.data.map((d: Json, i: number) => {
    if (!Array.isArray(d?.embedding) && typeof d?.embedding !== 'string') throw new UpstreamBrokeOff('an embedding of the upstream reply is neither numbers nor base64');
    return { index: indexOf(d, i), embedding: d.embedding };
  });
  if (!body.usage || typeof body.usage !== 'object') throw new UpstreamBrokeOff('the upstream reply has no usage');
  return { data, promptTokens: asInt(body.usage.prompt_tokens) };
}

const CONTEXT_WORDING = /context length|context window|context size|maximum context|too many tokens|exceeds the available context/i;

/** What an upstream's non-2xx answer means to the caller. */
export function errorAnswer(status: number, bodyText: string, quirks: ReplyQuirks): ApiError {
  let body: Json | undefined;
  try {
    body = JSON.parse(bodyText);
  } catch {
    body = undefined;
  }
  const message = errorMessage(body) ?? (bodyText.slice(0, 300) || `HTTP ${status}`);
  const e: Json = body?.error ?? body ?? {};
  const isContext = e.code === 'context_length_exceeded' || quirks.isContextError?.(e) || ((status === 400 || status === 413) && CONTEXT_WORDING.test(message));
  if (isContext) return contextLengthExceeded(`The prompt plus max_tokens exceed this model's context window (upstream said: ${message}).`);
  if (status >= 400 && status < 500 && status !== 408 && status !== 429) {
    return upstreamRejected(status === 404 ? 400 : status, message, typeof e.param === 'string' ? e.param : null);
  }
  if (status >= 500 && quirks.requestFaultMessage?.test(message)) return upstreamRejected(400, `The model's server could not read this request: ${message}`, null);
  return upstreamFailed(`HTTP ${status}: ${message}`, status);
}
