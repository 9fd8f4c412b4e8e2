// The request path every API's request takes (chat completions, text
// completions, embeddings, and through chat's, Anthropic's Messages and
// OpenAI's Responses: gateway/chat-mapped.ts), in one direction: the shared front (gateway/exchange.ts:
// authenticate, read, find the model) → validate → check the context window
// → rate limit and hold credit → route and forward (failing over before the
// first byte) → normalize through the dialect → render (stream or whole) →
// settle. An API adds its schema, its upstream bodies, its readers and its
// renderers (ApiDescriptor), not a second pipeline.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import type { ApiName, ClientApi, GatewaySettings } from '../config.js';
import type { BatchLineResult } from '../billing/credit-ledger.js';
import type { Completion, ReplyIdentity, StreamEvent, Usage, ReplyRenderer } from '../protocol/chat-response.js';
import { ApiError, checkContextWindow, promptTooLong } from '../protocol/errors.js';
import { bounded } from '../protocol/bounded-text.js';
import { sendJson, sendJsonParts } from '../protocol/http-io.js';
import { servingTier, type ServiceTier } from '../protocol/service-tier.js';
import { accountKey, hintKey } from '../routing/affinity-key.js';
import { isNamedInTable, type RoutedEndpoint, type RoutedModel } from '../routing/routing-table.js';
import type { UpstreamBody } from '../upstream/client.js';
import { mergeStreams, type FanOut } from '../upstream/fan-out.js';
import type { GatewayContext } from './context.js';
import { openExchange, servingModel, type Exchange } from './exchange.js';
import { callWithFailover, type UpstreamCall, type UpstreamRequest } from './failover.js';
import { Meter } from './metering.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import { randomId } from './random-ids.js';
import { StreamRelay } from './stream-relay.js';

/** A reply already written, in parts (text around bytes passed on as they came): sent as it is. */
export class WrittenReply {
  constructor(readonly parts: (string | Buffer)[]) {}
}

/** A streamed reply: how the upstream's stream is read, and how the API renders it. */
export interface Streaming<R> {
  read(endpoint: RoutedEndpoint, body: UpstreamBody): AsyncGenerator<StreamEvent[]>;
  /** The renderer of one streamed reply; `countedPromptTokens` is the prompt's exact count where the gateway has one, else 0. */
  renderer(identity: ReplyIdentity, request: R, countedPromptTokens: number): ReplyRenderer;
}

/** A whole reply as read from the upstream: its usage, and a generation's choices (embeddings have none). */
interface WholeReply {
  usage: Usage;
  choices?: { finish_reason: string | null }[];
}

/** Each prompt's tokens, and whether they were counted (not bounded from the text). */
export interface PromptCount {
  tokens: number[];
  exact: boolean;
}

/** What an API brings to the shared path. `W` is a whole reply as read from the upstream. */
export interface ApiDescriptor<R, W extends WholeReply = Completion> {
  /** The API, as usage events name it. */
  name: ClientApi;
  /** What a model must serve to be called through this API. */
  serves: ApiName;
  /** What reply ids start with: `chatcmpl-`, `cmpl-`, `msg_`; null for replies without one (embeddings). */
  idPrefix: string | null;
  parse(body: unknown): R | ApiError;
  /**
   * The fields every generation request has, under whatever names. With
   * `fitToWindow`, a reply cap larger than the room the prompt leaves is
   * lowered to that room (Anthropic's clients ask for 32,000 whatever the
   * model), where chat's contract refuses it.
   */
  common(request: R): { model: string; n: number; stream: boolean; maxTokens: number | undefined; user: string | undefined; serviceTier: string | null | undefined; fitToWindow?: boolean };
  /** The request field that holds the prompt, where it is not chat's `messages` (Responses: `input`): context errors name it. */
  promptField?: string;
  /**
   * Each prompt's tokens (one prompt, or a batch): counted exactly where the model has a tokenizer (on the
   * counter's own thread, hence the promise) or the prompt is token ids, else an upper bound from the text. A
   * prompt sure to overflow the window is refused here.
   */
  promptTokens(model: RoutedModel, request: R): PromptCount | Promise<PromptCount>;
  /** What prefix affinity keys the request by when the client gives no hint (routing/affinity-key.ts). */
  affinityKey(request: R): string;
  /** The client's own name for the cache it needs, where the API has one (`prompt_cache_key`). */
  cacheHint?(request: R): string | null | undefined;
  /** The request with its reply cap lowered to what the balance pays for. */
  withMaxTokens(request: R, maxTokens: number): R;
  /** The upstream calls, prompt by prompt (see upstream/fan-out.ts). */
  upstreamRequest(endpoint: RoutedEndpoint, model: RoutedModel, request: R, passThrough: Record<string, unknown>): UpstreamRequest;
  /** Engine extras the model passes through, from the raw body; a 400 where one holds invalid text. */
  passThrough(body: unknown, model: RoutedModel): Record<string, unknown> | ApiError;
  readWhole(endpoint: RoutedEndpoint, body: UpstreamBody, request: R): Promise<W>;
  /** The whole replies of several calls as one (`n` fanned out, a batch of prompts). */
  mergeWhole(parts: W[], fanOut: FanOut): W;
  /** The reply's body: JSON, or a WrittenReply. */
  renderWhole(identity: ReplyIdentity, whole: W, request: R): unknown;
  /** Absent for an API that never streams. */
  streaming?: Streaming<R>;
}

/**
 * Without a tokenizer, how many UTF-8 bytes of prompt make a token, for
 * fitting a reply into the window: about 4 for English text and code with
 * the tokenizers of today's models, 3 to lean safe. A bound of a token per
 * byte would starve the reply (Claude Code's 48 KB prompt is about 12 K
 * tokens).
 */
const BYTES_PER_TOKEN_ESTIMATE = 3;

/** A prompt's tokens estimated from its bound in bytes (see BYTES_PER_TOKEN_ESTIMATE). */
export const estimatedTokens = (bytesBound: number) => Math.ceil(bytesBound / BYTES_PER_TOKEN_ESTIMATE);

/** The reply cap per choice: what was asked, checked against the room the longest prompt leaves in the window, or fitted into it. */
function replyCap(window: number, prompts: { tokens: number[]; exact: boolean }, asked: ReturnType<ApiDescriptor<unknown>['common']>, promptField: string | undefined): number {
  const longest = Math.max(...prompts.tokens);
  if (asked.fitToWindow) {
    const prompt = prompts.exact ? longest : estimatedTokens(longest);
    // Only a count can refuse: an estimate leaves that to the upstream, whose context error is passed on.
    if (prompts.exact && prompt >= window) throw promptTooLong(prompt, window, '', promptField);
    const room = Math.max(1, window - prompt);
    return Math.min(asked.maxTokens ?? room, room);
  }
  if (prompts.exact) checkContextWindow(window, longest, asked.maxTokens ?? 1, promptField);
  return asked.maxTokens ?? Math.max(1, window - (prompts.exact ? longest : 0));
}

/** One upstream body per call: all `n` choices in one, or one call per choice where the dialect needs it. */
export function perChoiceBodies(endpoint: RoutedEndpoint, body: Record<string, unknown>, n: number, seed: number | null | undefined): Record<string, unknown>[] {
  if (n === 1 || endpoint.dialect.multipleChoices) return [body];
  return Array.from({ length: n }, (_, i) => {
    const { n: _n, ...single } = body;
    return seed != null ? { ...single, seed: seed + i } : single;
  });
}

/**
 * The request with what the endpoint's engine takes from Parley rather than the client: its tier's priority, where
 * the endpoint schedules by it, and the account's cache salt, where the model keeps each account's prefix cache
 * apart (accounts/cache-salt.ts). A salt the client sent (a model's passThrough may let it) follows the account's,
 * so it can only divide the account's cache further. Set in place: the bodies are this call's own.
 */
function withEngineFields(sent: UpstreamRequest, endpoint: RoutedEndpoint, tier: ServiceTier, cacheSalt: string | undefined): UpstreamRequest {
  const { priorityOf, saltsPrefixCache } = endpoint.dialect;
  const priority = endpoint.priorityScheduling && priorityOf ? priorityOf(tier) : undefined;
  const salt = saltsPrefixCache ? cacheSalt : undefined;
  for (const body of sent.bodies) {
    if (priority !== undefined) body.priority = priority;
    if (salt !== undefined) body.cache_salt = typeof body.cache_salt === 'string' ? `${salt}.${body.cache_salt}` : salt;
  }
  return sent;
}

/** Claude Code names its session in this header, as well as in `metadata.user_id`, which the Messages mapping reads. */
const CLAUDE_CODE_SESSION_HEADER = 'x-claude-code-session-id';

/** The session a request header names: the one the routing file's `sessionHeader` names, else Claude Code's. */
function sessionHeader(headers: IncomingHttpHeaders, settings: GatewaySettings): string | undefined {
  for (const name of [settings.sessionHeader, CLAUDE_CODE_SESSION_HEADER]) {
    const value = name ? headers[name] : undefined;
    if (typeof value === 'string' && value !== '') return value;
  }
  return undefined;
}

/**
 * The request's affinity key: the client's hint (its `prompt_cache_key`, else a session header), else what its
 * prompt says; the account's own where the model keeps each account's cache apart.
 */
function affinityKey<R>(api: Pick<ApiDescriptor<R>, 'affinityKey' | 'cacheHint'>, request: R, headers: IncomingHttpHeaders, settings: GatewaySettings, account: string | undefined): string {
  const hint = api.cacheHint?.(request) ?? sessionHeader(headers, settings);
  const key = hint ? hintKey(hint) : api.affinityKey(request);
  return account === undefined ? key : accountKey(account, key);
}

/** A request read, checked and priced, ready for its hold: everything the path learns before it touches money. */
interface Admitted<R> {
  request: R;
  asked: ReturnType<ApiDescriptor<R>['common']>;
  model: RoutedModel;
  passThrough: Record<string, unknown>;
  prompts: PromptCount;
  promptTokens: number;
  maxReplyTokens: number;
  /** Replies paid for: `n` for each prompt. */
  replies: number;
  tier: ServiceTier;
  identity: ReplyIdentity;
  /** The ids the client is given, for its usage event. */
  clientIds: { requestId: string; replyId: string };
}

/** Validates the body as the API's request for a model the caller may use, and counts what it may cost. */
async function admit<R>(api: ApiDescriptor<R, WholeReply>, exchange: Exchange, span: Span, record: RequestRecord): Promise<Admitted<R>> {
  const { caller, table, body } = exchange;
  const request = api.parse(body);
  if (request instanceof ApiError) throw request;
  const asked = api.common(request);
  record.model = bounded(asked.model);
  record.streamed = asked.stream;
  const model = servingModel(table, asked.model, api.serves, span, caller);
  record.servedModel = model.config.id;
  // A name a pattern alias matched is the client's to vary: metrics label it by the model it found.
  record.modelLabel = isNamedInTable(table, asked.model) ? asked.model : model.config.id;
  const passThrough = api.passThrough(body, model);
  if (passThrough instanceof ApiError) throw passThrough;
  const counted = api.promptTokens(model, request);
  // Awaited only where counted on the counter's thread: an await of a count already made would cost a turn too
  // (with the rest of 5a1abda, `node bench/revision-ab.mjs 5a1abda~ whole 32 6 8` gave 1.11, 2026-11-29).
  const prompts = counted instanceof Promise ? await counted : counted;
  const tier = servingTier(asked.serviceTier, caller.tier);
  record.serviceTier = tier;
  const identity: ReplyIdentity = { id: `${api.idPrefix ?? ''}${record.id}`, created: Math.floor(Date.now() / 1000), model: asked.model, serviceTier: tier };
  const clientIds = { requestId: record.id, replyId: api.idPrefix === null ? '' : identity.id };
  if (clientIds.replyId) record.replyId = clientIds.replyId;
  return {
    request,
    asked,
    model,
    passThrough,
    prompts,
    promptTokens: prompts.tokens.reduce((sum, t) => sum + t, 0),
    maxReplyTokens: replyCap(model.config.contextWindow, prompts, asked, api.promptField),
    replies: prompts.tokens.length * asked.n,
    tier,
    identity,
    clientIds,
  };
}

/** The relay of a streamed reply, opened once the hold is in and before the upstream's answer is awaited, so that keep-alives and early failures reach the client. */
function openRelay<R>(streaming: Streaming<R>, a: Admitted<R>, request: R, res: ServerResponse, ctx: GatewayContext, exchange: Exchange, meter: Meter, record: RequestRecord, started: number): StreamRelay {
  const counted = a.prompts.exact ? a.promptTokens : 0;
  return new StreamRelay(res, {
    renderer: streaming.renderer(a.identity, request, counted),
    keepAliveMs: exchange.table.settings.keepAliveMs,
    sendTimeoutMs: exchange.table.settings.clientSendTimeoutMs,
    headers: meter.rateLimitHeaders,
    countedPromptTokens: counted,
    clientGone: exchange.clientGone,
    onFirstChunk: () => {
      record.firstByteMs = performance.now() - started;
      ctx.telemetry.recordFirstToken(record, record.firstByteMs / 1000);
    },
  });
}

/**
 * A batch line's reply: sent to no one, but kept as the line's result, which the settlement that charges the
 * reply writes (gateway/batch-runner.ts).
 */
export interface LineReply {
  /** The line's result and where it goes, made from the reply's JSON text. */
  result(body: string): BatchLineResult;
  /** Resolves once the charge and the result are in Redis; set when the reply is complete. */
  landed?: Promise<void>;
}

/** Where a reply goes: the client's response, or a batch line's result. */
type ReplyTo = { res: ServerResponse } | { line: LineReply };

/** `record`: what the request comes to, filled in here for its log line, metrics and span (telemetry/request-record.ts). */
export async function handleApiRequest<R, W extends WholeReply>(api: ApiDescriptor<R, W>, req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  const started = performance.now();
  record.api = api.name;
  return serve(api, await openExchange(req, res, ctx), { res }, ctx, span, record, started);
}

/** A batch line, through the same path as a client's request; its body asks for a whole reply. */
export function serveBatchLine<R, W extends WholeReply>(api: ApiDescriptor<R, W>, exchange: Exchange, line: LineReply, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  record.api = api.name;
  return serve(api, exchange, { line }, ctx, span, record, performance.now());
}

async function serve<R, W extends WholeReply>(api: ApiDescriptor<R, W>, exchange: Exchange, to: ReplyTo, ctx: GatewayContext, span: Span, record: RequestRecord, started: number): Promise<void> {
  const { caller, table } = exchange;
  record.settings = table.settings;
  record.arrivedAt = started;
  record.account = caller.account;
  record.keyId = caller.keyId;
  const a = await admit(api, exchange, span, record);
  const meter = await Meter.open(ctx, span, {
    table, caller, model: a.model, settlementId: randomId(), clientIds: a.clientIds, promptTokens: a.promptTokens,
    n: a.replies, maxReplyTokens: a.maxReplyTokens, user: a.asked.user, api: api.name, tier: a.tier,
  });
  record.admittedMs = performance.now() - started;

  let call: UpstreamCall | undefined;
  let relay: StreamRelay | undefined;
  try {
    // A window or a balance that leaves room for fewer reply tokens than asked lowers the limit sent upstream.
    const request = meter.maxReplyTokens < (a.asked.maxTokens ?? a.maxReplyTokens) ? api.withMaxTokens(a.request, meter.maxReplyTokens) : a.request;
    const streaming = a.asked.stream && 'res' in to ? api.streaming : undefined;
    relay = streaming && 'res' in to ? openRelay(streaming, a, request, to.res, ctx, exchange, meter, record, started) : undefined;
    const ownCache = a.model.config.routing.prefixCache === 'per-account';
    const plan = await ctx.router.plan(a.model, () => affinityKey(api, a.request, exchange.headers, table.settings, ownCache ? caller.account : undefined), a.promptTokens, caller.account);
    // Embeddings read no cache.
    const cacheSalt = ownCache && api.name !== 'embeddings' ? caller.cacheSalt : undefined;
    call = await callWithFailover(ctx, span, {
      model: a.model, settings: table.settings, plan, account: caller.account, tier: a.tier, cancellation: exchange.upstreamCall, record,
      upstreamRequest: (endpoint) => withEngineFields(api.upstreamRequest(endpoint, a.model, request, a.passThrough), endpoint, a.tier, cacheSalt),
    });
    record.endpoint = call.endpoint.url;
    record.provider = call.endpoint.kind;
    const served = { api, call, request, meter, record, ctx, fanOut: { choicesPerCall: a.replies / call.bodies.length, callsPerPrompt: call.bodies.length / a.prompts.tokens.length } };
    if (relay && streaming) await relayStream(served, streaming, relay);
    else await sendWhole(served, a.identity, to, meter.rateLimitHeaders, started);
  } catch (err) {
    // What is still open upstream (the other calls of a fan-out whose one call failed) is not read: it ends.
    exchange.upstreamCall.cancel('failed');
    const failure = meter.fail(err, call?.endpoint.name ?? '', exchange.clientGone());
    if (failure instanceof ApiError && relay?.failBeforeStart(failure)) return;
    throw failure;
  } finally {
    call?.release();
  }
}

/** A request its upstream has taken: what reading, rendering and settling its reply need. */
interface Served<R, W extends WholeReply> {
  api: ApiDescriptor<R, W>;
  call: UpstreamCall;
  request: R;
  meter: Meter;
  record: RequestRecord;
  ctx: GatewayContext;
  fanOut: FanOut;
}

/** Charges a reply that completed (with a batch line's result), and notes its usage where routing and telemetry read it. */
function settleComplete(s: Pick<Served<unknown, WholeReply>, 'ctx' | 'call' | 'record' | 'meter'>, usage: Usage, batchResult?: BatchLineResult): void {
  s.ctx.router.state(s.call.endpoint).recordUsage(usage.prompt_tokens, usage.cached_tokens);
  // Named one by one: Object.assign of a new literal onto the record, whose shape grows as the request goes, took
  // V8's slow path (0.1 to 0.8 µs a call in a loop, where these take tens of ns); with the rest of 0327bf4, `node
  // bench/revision-ab.mjs 0327bf4~ whole 32 6 8` gave 1.07 (2026-11-29).
  s.record.promptTokens = usage.prompt_tokens;
  s.record.cachedTokens = usage.cached_tokens;
  s.record.completionTokens = usage.completion_tokens;
  s.record.cost = s.meter.settle('complete', s.call.endpoint.name, usage, undefined, batchResult);
}

async function sendWhole<R, W extends WholeReply>(s: Served<R, W>, identity: ReplyIdentity, to: ReplyTo, headers: Record<string, string>, started: number): Promise<void> {
  const parts = await Promise.all(s.call.bodies.map((b) => s.api.readWhole(s.call.endpoint, b, s.request)));
  const whole = parts.length === 1 ? parts[0] : s.api.mergeWhole(parts, s.fanOut);
  if (whole.choices) s.record.finishReasons = whole.choices.map((c) => c.finish_reason ?? '');
  const reply = s.api.renderWhole(identity, whole, s.request);
  s.record.firstByteMs = performance.now() - started;
  if ('line' in to) {
    const text = reply instanceof WrittenReply ? Buffer.concat(reply.parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p))).toString() : JSON.stringify(reply);
    settleComplete(s, whole.usage, to.line.result(text));
    to.line.landed = s.meter.landed;
    return;
  }
  if (reply instanceof WrittenReply) sendJsonParts(to.res, reply.parts, headers);
  else sendJson(to.res, 200, reply, headers);
  settleComplete(s, whole.usage);
}

async function relayStream<R, W extends WholeReply>(s: Served<R, W>, streaming: Streaming<R>, relay: StreamRelay): Promise<void> {
  const { endpoint } = s.call;
  const streams = s.call.bodies.map((b) => streaming.read(endpoint, b));
  const outcome = await relay.run(streams.length === 1 ? streams[0] : mergeStreams(streams, s.fanOut));
  if (outcome.kind === 'complete') {
    s.record.finishReasons = outcome.finishReasons;
    settleComplete(s, outcome.usage);
  } else if (outcome.kind === 'client_gone') {
    s.record.brokenOff = 'client_gone';
    s.meter.settle('client_gone', endpoint.name);
  } else {
    s.record.brokenOff = 'upstream_broke_off';
    console.warn(`parley: ${s.record.id}: ${endpoint.name}: stream broke off: ${bounded(outcome.reason)}`);
    s.meter.settle('broke_off', endpoint.name, undefined, outcome.reason);
  }
}
