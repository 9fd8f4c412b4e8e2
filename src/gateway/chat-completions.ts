// POST /v1/chat/completions, the request path in one direction:
// authenticate → validate → find the model → check the context window →
// rate limit → hold credit → forward (failing over before the first byte) →
// render (stream or whole) → settle.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseChatCompletionRequest, requestedMaxTokens, type ChatCompletionRequest } from '../protocol/chat-request.js';
import { renderCompletion, type ReplyIdentity } from '../protocol/chat-response.js';
import { ApiError, checkContextWindow, modelNotFound, noHealthyUpstream, stateUnavailable } from '../protocol/errors.js';
import { readJsonBody, sendJson } from '../protocol/http-io.js';
import { admitRequest } from '../ratelimit/rate-limiter.js';
import { healthyEndpoints, markReachable, markUnreachable } from '../routing/endpoint-health.js';
import type { RoutedEndpoint, RoutedModel } from '../routing/routing-table.js';
import { postChatCompletion, readCompletion, readStream, type UpstreamBody, type UpstreamTimeouts } from '../upstream/client.js';
import { mergeCompletions, mergeStreams } from '../upstream/fan-out.js';
import type { GatewayContext } from './context.js';
import { Meter } from './metering.js';
import { StreamRelay } from './stream-relay.js';

// Without a tokenizer, a prompt is bounded by its UTF-8 bytes (a byte-level
// tokenizer never makes more tokens than bytes) plus the template's framing.
const FRAMING_TOKENS_PER_MESSAGE = 8;

/** Prompt tokens: counted exactly where the model has a tokenizer, else an upper bound from the text. */
function promptTokens(model: RoutedModel, request: ChatCompletionRequest): { tokens: number; exact: boolean } {
  if (model.countPromptTokens) return { tokens: model.countPromptTokens(request.messages), exact: true };
  let bound = FRAMING_TOKENS_PER_MESSAGE;
  for (const m of request.messages) {
    const content = typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? '');
    bound += Buffer.byteLength(content) + FRAMING_TOKENS_PER_MESSAGE;
  }
  return { tokens: bound, exact: false };
}

/** One upstream body per call: all `n` choices in one, or one call per choice where the dialect needs it. */
function upstreamBodies(endpoint: RoutedEndpoint, model: RoutedModel, request: ChatCompletionRequest): Record<string, unknown>[] {
  const body = endpoint.dialect.requestBody(request, {
    upstreamModel: endpoint.upstreamModel,
    supportsTools: model.config.supports.tools,
    supportsJsonOutput: model.config.supports.jsonOutput,
  });
  const n = request.n ?? 1;
  if (n === 1 || endpoint.dialect.multipleChoices) return [body];
  return Array.from({ length: n }, (_, i) => {
    const { n: _n, ...single } = body;
    return request.seed != null ? { ...single, seed: request.seed + i } : single;
  });
}

/** A failure before the upstream's first byte that another endpoint may not share. */
const isRetryable = (err: unknown) => err instanceof ApiError && (err.code === 'upstream_unreachable' || err.code === 'upstream_error');

/**
 * Sends the request to each healthy endpoint in turn until one answers with
 * a 2xx. Only failures before the first byte move on: once an upstream
 * answers, its reply is the reply.
 */
async function callWithFailover(
  model: RoutedModel,
  request: ChatCompletionRequest,
  signal: AbortSignal,
  timeouts: UpstreamTimeouts,
): Promise<{ endpoint: RoutedEndpoint; bodies: UpstreamBody[] }> {
  const candidates = healthyEndpoints(model);
  if (candidates.length === 0) throw noHealthyUpstream(request.model, 2);
  let lastError: unknown;
  for (const endpoint of candidates) {
    try {
      const bodies = await Promise.all(upstreamBodies(endpoint, model, request).map((b) => postChatCompletion(endpoint, b, signal, timeouts)));
      markReachable(endpoint);
      return { endpoint, bodies };
    } catch (err) {
      if (err instanceof ApiError && err.code === 'upstream_unreachable') markUnreachable(endpoint);
      if (!isRetryable(err) || signal.aborted) throw err;
      console.warn(`parley: ${endpoint.name}: ${(err as Error).message}; trying the next endpoint`);
      lastError = err;
    }
  }
  throw lastError;
}

function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && /^[\w.:-]{1,128}$/.test(given) ? given : randomUUID();
}

export async function handleChatCompletion(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext): Promise<void> {
  const caller = await ctx.keys.authenticate(req.headers.authorization);
  const table = ctx.routing();
  const { settings } = table;
  const parsed = parseChatCompletionRequest(await readJsonBody(req, settings.maxBodyBytes));
  if (parsed instanceof ApiError) throw parsed;
  const model = table.models.get(parsed.model);
  if (!model) throw modelNotFound(parsed.model);
  const prompt = promptTokens(model, parsed);
  const requestedReply = requestedMaxTokens(parsed);
  if (prompt.exact) checkContextWindow(model.config.contextWindow, prompt.tokens, requestedReply ?? 1);
  const n = parsed.n ?? 1;
  const maxReplyTokens = requestedReply ?? Math.max(1, model.config.contextWindow - (prompt.exact ? prompt.tokens : 0));

  let limitHeaders: Record<string, string>;
  try {
    limitHeaders = await admitRequest(ctx.redis, caller.keyId, { ...table.rateLimits, ...caller.limits }, prompt.tokens + n * maxReplyTokens);
  } catch (err) {
    throw err instanceof ApiError ? err : stateUnavailable();
  }
  const meter = await Meter.open(ctx, { caller, model, settlementId: randomUUID(), promptTokens: prompt.tokens, n, maxReplyTokens });
  // A balance that pays for fewer reply tokens than asked lowers the limit sent upstream.
  const request: ChatCompletionRequest =
    meter.maxReplyTokens < maxReplyTokens ? { ...parsed, max_tokens: meter.maxReplyTokens, max_completion_tokens: meter.maxReplyTokens } : parsed;

  const id = requestId(req);
  const headers = { 'x-request-id': id, ...limitHeaders };
  const identity: ReplyIdentity = { id: `chatcmpl-${id}`, created: Math.floor(Date.now() / 1000), model: request.model };
  const clientGone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) clientGone.abort();
  });
  const timeouts: UpstreamTimeouts = { firstByteMs: settings.upstreamFirstByteTimeoutMs, idleMs: settings.upstreamIdleTimeoutMs };
  const relay = request.stream
    ? new StreamRelay(res, {
        identity,
        includeUsage: request.stream_options?.include_usage === true,
        keepAliveMs: settings.keepAliveMs,
        headers,
        countedPromptTokens: prompt.exact ? prompt.tokens : 0,
        clientGone: clientGone.signal,
      })
    : undefined;

  let endpoint: RoutedEndpoint | undefined;
  try {
    const call = await callWithFailover(model, request, clientGone.signal, timeouts);
    endpoint = call.endpoint;
    if (!relay) {
      const parts = await Promise.all(call.bodies.map((b) => readCompletion(call.endpoint, b)));
      const completion = parts.length === 1 ? parts[0] : mergeCompletions(parts);
      sendJson(res, 200, renderCompletion(identity, completion), headers);
      meter.settle('complete', endpoint.name, completion.usage);
      return;
    }
    const streams = call.bodies.map((b) => readStream(call.endpoint, b));
    const outcome = await relay.run(streams.length === 1 ? streams[0] : mergeStreams(streams));
    if (outcome.kind === 'complete') meter.settle('complete', endpoint.name, outcome.usage);
    else if (outcome.kind === 'client_gone') meter.settle('client_gone', endpoint.name);
    else {
      console.warn(`parley: ${id}: ${endpoint.name}: stream broke off: ${outcome.reason}`);
      meter.settle('broke_off', endpoint.name, undefined, outcome.reason);
    }
  } catch (err) {
    meter.settle(clientGone.signal.aborted ? 'client_gone' : 'failed', endpoint?.name ?? '', undefined, (err as Error).message);
    if (err instanceof ApiError && relay?.failBeforeStart(err)) return;
    throw err;
  }
}
