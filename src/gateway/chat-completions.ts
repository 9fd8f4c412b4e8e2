// POST /v1/chat/completions, the request path in one direction: the shared
// front (gateway/exchange.ts: authenticate, read, find the model) →
// validate → check the context window → rate limit and hold credit →
// route and forward (failing over before the first byte) → render (stream
// or whole) → settle.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import { messageText, parseChatCompletionRequest, passThroughFields, requestedMaxTokens, type ChatCompletionRequest } from '../protocol/chat-request.js';
import { renderCompletion, type ReplyIdentity, type Usage } from '../protocol/chat-response.js';
import { ApiError, checkContextWindow, shuttingDown } from '../protocol/errors.js';
import { sendJson } from '../protocol/http-io.js';
import type { RoutedEndpoint, RoutedModel } from '../routing/routing-table.js';
import { readCompletion, readStream } from '../upstream/client.js';
import { mergeCompletions, mergeStreams } from '../upstream/fan-out.js';
import type { GatewayContext } from './context.js';
import { openExchange, servingModel } from './exchange.js';
import { callWithFailover, type UpstreamCall } from './failover.js';
import { conversationText } from '../routing/prefix-blocks.js';
import { Meter } from './metering.js';
import { randomId } from './random-ids.js';
import { StreamRelay } from './stream-relay.js';

// Without a tokenizer, a prompt is bounded by its UTF-8 bytes (a byte-level
// tokenizer never makes more tokens than bytes) plus the template's framing.
const FRAMING_TOKENS_PER_MESSAGE = 8;

/** Prompt tokens: counted exactly where the model has a tokenizer, else an upper bound from the text. */
function promptTokens(model: RoutedModel, request: ChatCompletionRequest): { tokens: number; exact: boolean } {
  if (model.countPromptTokens) return { tokens: model.countPromptTokens(request.messages), exact: true };
  let bound = FRAMING_TOKENS_PER_MESSAGE;
  for (const m of request.messages) {
    bound += Buffer.byteLength(messageText(m)) + FRAMING_TOKENS_PER_MESSAGE;
  }
  return { tokens: bound, exact: false };
}

/** One upstream body per call: all `n` choices in one, or one call per choice where the dialect needs it. */
function upstreamBodies(endpoint: RoutedEndpoint, model: RoutedModel, request: ChatCompletionRequest, passThrough: Record<string, unknown>): Record<string, unknown>[] {
  const body = endpoint.dialect.requestBody(request, {
    upstreamModel: endpoint.upstreamModel,
    supportsTools: model.config.supports.tools,
    supportsJsonOutput: model.config.supports.jsonOutput,
    passThrough,
  });
  const n = request.n ?? 1;
  if (n === 1 || endpoint.dialect.multipleChoices) return [body];
  return Array.from({ length: n }, (_, i) => {
    const { n: _n, ...single } = body;
    return request.seed != null ? { ...single, seed: request.seed + i } : single;
  });
}

export async function handleChatCompletion(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span): Promise<void> {
  const started = performance.now();
  const { id, caller, table, body, upstreamCall, clientGone } = await openExchange(req, res, ctx, span);
  const { settings } = table;
  const parsed = parseChatCompletionRequest(body);
  if (parsed instanceof ApiError) throw parsed;
  const model = servingModel(table, parsed.model, 'chat', span, caller);
  const passThrough = passThroughFields(body, model.config.passThrough);
  if (passThrough instanceof ApiError) throw passThrough;
  const prompt = promptTokens(model, parsed);
  const requestedReply = requestedMaxTokens(parsed);
  if (prompt.exact) checkContextWindow(model.config.contextWindow, prompt.tokens, requestedReply ?? 1);
  const n = parsed.n ?? 1;
  const maxReplyTokens = requestedReply ?? Math.max(1, model.config.contextWindow - (prompt.exact ? prompt.tokens : 0));

  const meter = await Meter.open(ctx, span, { caller, model, settlementId: randomId(), promptTokens: prompt.tokens, n, maxReplyTokens, user: parsed.user ?? undefined });
  // A balance that pays for fewer reply tokens than asked lowers the limit sent upstream.
  const request: ChatCompletionRequest =
    meter.maxReplyTokens < maxReplyTokens ? { ...parsed, max_tokens: meter.maxReplyTokens, max_completion_tokens: meter.maxReplyTokens } : parsed;

  // Object.assign, not a spread: see sendJson in protocol/http-io.ts.
  const headers = Object.assign({ 'x-request-id': id }, meter.rateLimitHeaders);
  const identity: ReplyIdentity = { id: `chatcmpl-${id}`, created: Math.floor(Date.now() / 1000), model: request.model };
  const relay = request.stream
    ? new StreamRelay(res, {
        identity,
        includeUsage: request.stream_options?.include_usage === true,
        keepAliveMs: settings.keepAliveMs,
        headers,
        countedPromptTokens: prompt.exact ? prompt.tokens : 0,
        clientGone,
        onFirstChunk: () => ctx.telemetry.recordFirstToken(model.config.id, (performance.now() - started) / 1000),
      })
    : undefined;

  const complete = (done: UpstreamCall, usage: Usage) => {
    ctx.router.state(done.endpoint).recordUsage(usage.prompt_tokens, usage.cached_tokens);
    ctx.telemetry.recordUsage(model.config.id, usage);
    meter.settle('complete', done.endpoint.name, usage);
  };
  let call: UpstreamCall | undefined;
  try {
    const upstreamRequest = (endpoint: RoutedEndpoint) => ({ path: '/chat/completions', bodies: upstreamBodies(endpoint, model, request, passThrough) });
    call = await callWithFailover(ctx, span, { model, upstreamRequest, plan: ctx.router.plan(model, () => conversationText(request.messages)), account: caller.account, cancellation: upstreamCall });
    const { endpoint } = call;
    if (!relay) {
      const parts = await Promise.all(call.bodies.map((b) => readCompletion(endpoint, b)));
      const completion = parts.length === 1 ? parts[0] : mergeCompletions(parts);
      sendJson(res, 200, renderCompletion(identity, completion), headers);
      complete(call, completion.usage);
      return;
    }
    const streams = call.bodies.map((b) => readStream(endpoint, b));
    const outcome = await relay.run(streams.length === 1 ? streams[0] : mergeStreams(streams));
    if (outcome.kind === 'complete') complete(call, outcome.usage);
    else if (outcome.kind === 'client_gone') meter.settle('client_gone', endpoint.name);
    else {
      console.warn(`parley: ${id}: ${endpoint.name}: stream broke off: ${outcome.reason}`);
      meter.settle('broke_off', endpoint.name, undefined, outcome.reason);
    }
  } catch (err) {
    meter.settle(clientGone() ? 'client_gone' : 'failed', call?.endpoint.name ?? '', undefined, (err as Error).message);
    const failure = ctx.lifecycle.stopped && !(err instanceof ApiError) ? shuttingDown() : err;
    if (failure instanceof ApiError && relay?.failBeforeStart(failure)) return;
    throw failure;
  } finally {
    call?.release();
  }
}
