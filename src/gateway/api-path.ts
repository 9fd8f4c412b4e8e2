// The request path every API's request takes (chat completions, text
// completions, embeddings, and through chat's, Anthropic's Messages and
// OpenAI's Responses: gateway/chat-mapped.ts), in one direction: the shared front (gateway/exchange.ts:
// authenticate, read, find the model) → validate → check the context window
// → rate limit and hold credit → route and forward (failing over before the
// first byte) → normalize through the dialect → render (stream or whole) →
// settle. An API adds its schema, its upstream bodies, its readers and its
// renderers (ApiDescriptor), not a second pipeline.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import type { ApiName, ClientApi, GatewaySettings } from '../config.js';
import type { Completion, ReplyIdentity, StreamEvent, Usage, ReplyRenderer } from '../protocol/chat-response.js';
import { ApiError, checkContextWindow, promptTooLong } from '../protocol/errors.js';
import { sendJson, sendJsonParts } from '../protocol/http-io.js';
import { servingTier, type ServiceTier } from '../protocol/service-tier.js';
import { hintKey } from '../routing/affinity-key.js';
import type { RoutedEndpoint, RoutedModel } from '../routing/routing-table.js';
import type { UpstreamBody } from '../upstream/client.js';
import { mergeStreams, type FanOut } from '../upstream/fan-out.js';
import type { GatewayContext } from './context.js';
import { openExchange, servingModel } from './exchange.js';
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

/** What an API brings to the shared path. `W` is a whole reply as read from the upstream. */
export interface ApiDescriptor<R, W extends { usage: Usage } = Completion> {
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
  /** Each prompt's tokens (one prompt, or a batch): counted exactly where the model has a tokenizer or the prompt is token ids, else an upper bound from the text. */
  promptTokens(model: RoutedModel, request: R): { tokens: number[]; exact: boolean };
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
function replyCap(window: number, prompts: { tokens: number[]; exact: boolean }, asked: ReturnType<ApiDescriptor<unknown>['common']>): number {
  const longest = Math.max(...prompts.tokens);
  if (asked.fitToWindow) {
    const prompt = prompts.exact ? longest : estimatedTokens(longest);
    // Only a count can refuse: an estimate leaves that to the upstream, whose context error is passed on.
    if (prompts.exact && prompt >= window) throw promptTooLong(prompt, window);
    const room = Math.max(1, window - prompt);
    return Math.min(asked.maxTokens ?? room, room);
  }
  if (prompts.exact) checkContextWindow(window, longest, asked.maxTokens ?? 1);
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

/** The request as an upstream that schedules by priority takes it: each body with its tier's priority. */
function withPriority(sent: UpstreamRequest, endpoint: RoutedEndpoint, tier: ServiceTier): UpstreamRequest {
  const { priorityOf } = endpoint.dialect;
  if (!endpoint.priorityScheduling || !priorityOf) return sent;
  return { ...sent, bodies: sent.bodies.map((b) => ({ ...b, priority: priorityOf(tier) })) };
}

/** Claude Code names its session in this header, as well as in `metadata.user_id`, which the Messages mapping reads. */
const CLAUDE_CODE_SESSION_HEADER = 'x-claude-code-session-id';

/** The session a request header names: the one the routing file's `sessionHeader` names, else Claude Code's. */
function sessionHeader(req: IncomingMessage, settings: GatewaySettings): string | undefined {
  for (const name of [settings.sessionHeader, CLAUDE_CODE_SESSION_HEADER]) {
    const value = name ? req.headers[name] : undefined;
    if (typeof value === 'string' && value !== '') return value;
  }
  return undefined;
}

/** The request's affinity key: the client's hint (its `prompt_cache_key`, else a session header), else what its prompt says. */
function affinityKey<R>(api: Pick<ApiDescriptor<R>, 'affinityKey' | 'cacheHint'>, request: R, req: IncomingMessage, settings: GatewaySettings): string {
  const hint = api.cacheHint?.(request) ?? sessionHeader(req, settings);
  return hint ? hintKey(hint) : api.affinityKey(request);
}

/** `record`: what the request comes to, filled in here for its log line, metrics and span (telemetry/request-record.ts). */
export async function handleApiRequest<R, W extends { usage: Usage }>(api: ApiDescriptor<R, W>, req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  const started = performance.now();
  const { id } = record;
  record.api = api.name;
  const { caller, table, body, upstreamCall, clientGone } = await openExchange(req, res, ctx);
  record.account = caller.account;
  record.keyId = caller.keyId;
  const parsed = api.parse(body);
  if (parsed instanceof ApiError) throw parsed;
  const asked = api.common(parsed);
  record.model = asked.model;
  record.streamed = asked.stream;
  const model = servingModel(table, asked.model, api.serves, span, caller);
  record.servedModel = model.config.id;
  const passThrough = api.passThrough(body, model);
  if (passThrough instanceof ApiError) throw passThrough;
  const prompts = api.promptTokens(model, parsed);
  const promptTokens = prompts.tokens.reduce((sum, t) => sum + t, 0);
  const maxReplyTokens = replyCap(model.config.contextWindow, prompts, asked);
  const replies = prompts.tokens.length * asked.n;

  const tier = servingTier(asked.serviceTier, caller.tier);
  record.serviceTier = tier;
  const identity: ReplyIdentity = { id: `${api.idPrefix ?? ''}${id}`, created: Math.floor(Date.now() / 1000), model: asked.model, serviceTier: tier };
  const clientIds = { requestId: id, replyId: api.idPrefix === null ? '' : identity.id };
  if (clientIds.replyId) record.replyId = clientIds.replyId;
  const meter = await Meter.open(ctx, span, { table, caller, model, settlementId: randomId(), clientIds, promptTokens, n: replies, maxReplyTokens, user: asked.user, api: api.name, tier });
  // A window or a balance that leaves room for fewer reply tokens than asked lowers the limit sent upstream.
  const request = meter.maxReplyTokens < (asked.maxTokens ?? maxReplyTokens) ? api.withMaxTokens(parsed, meter.maxReplyTokens) : parsed;

  const headers = meter.rateLimitHeaders;
  const streaming = asked.stream ? api.streaming : undefined;
  const relay = streaming
    ? new StreamRelay(res, {
        renderer: streaming.renderer(identity, request, prompts.exact ? promptTokens : 0),
        keepAliveMs: table.settings.keepAliveMs,
        headers,
        countedPromptTokens: prompts.exact ? promptTokens : 0,
        clientGone,
        onFirstChunk: () => {
          record.firstByteMs = performance.now() - started;
          ctx.telemetry.recordFirstToken(record, record.firstByteMs / 1000);
        },
      })
    : undefined;

  const complete = (done: UpstreamCall, usage: Usage) => {
    ctx.router.state(done.endpoint).recordUsage(usage.prompt_tokens, usage.cached_tokens);
    Object.assign(record, { promptTokens: usage.prompt_tokens, cachedTokens: usage.cached_tokens, completionTokens: usage.completion_tokens });
    record.cost = meter.settle('complete', done.endpoint.name, usage);
  };
  let call: UpstreamCall | undefined;
  try {
    const upstreamRequest = (endpoint: RoutedEndpoint) => withPriority(api.upstreamRequest(endpoint, model, request, passThrough), endpoint, tier);
    const plan = await ctx.router.plan(model, () => affinityKey(api, request, req, table.settings));
    call = await callWithFailover(ctx, span, { model, settings: table.settings, upstreamRequest, plan, account: caller.account, tier, cancellation: upstreamCall, record });
    const { endpoint } = call;
    record.endpoint = endpoint.url;
    record.provider = endpoint.kind;
    const fanOut = { choicesPerCall: replies / call.bodies.length, callsPerPrompt: call.bodies.length / prompts.tokens.length };
    if (!relay || !streaming) {
      const parts = await Promise.all(call.bodies.map((b) => api.readWhole(endpoint, b, request)));
      const whole = parts.length === 1 ? parts[0] : api.mergeWhole(parts, fanOut);
      if ('choices' in whole) record.finishReasons = (whole as unknown as Completion).choices.map((c) => c.finish_reason ?? '');
      const reply = api.renderWhole(identity, whole, request);
      record.firstByteMs = performance.now() - started;
      if (reply instanceof WrittenReply) sendJsonParts(res, reply.parts, headers);
      else sendJson(res, 200, reply, headers);
      complete(call, whole.usage);
      return;
    }
    const streams = call.bodies.map((b) => streaming.read(endpoint, b));
    const outcome = await relay.run(streams.length === 1 ? streams[0] : mergeStreams(streams, fanOut));
    if (outcome.kind === 'complete') {
      record.finishReasons = outcome.finishReasons;
      complete(call, outcome.usage);
    }
    else if (outcome.kind === 'client_gone') {
      record.brokenOff = 'client_gone';
      meter.settle('client_gone', endpoint.name);
    } else {
      record.brokenOff = 'upstream_broke_off';
      console.warn(`parley: ${id}: ${endpoint.name}: stream broke off: ${outcome.reason}`);
      meter.settle('broke_off', endpoint.name, undefined, outcome.reason);
    }
  } catch (err) {
    const failure = meter.fail(err, call?.endpoint.name ?? '', clientGone());
    if (failure instanceof ApiError && relay?.failBeforeStart(failure)) return;
    throw failure;
  } finally {
    call?.release();
  }
}
