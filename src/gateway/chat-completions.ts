// POST /v1/chat/completions, the request path in one direction:
// validate → find the model → check the context window → pick an endpoint →
// forward through its dialect → render (stream or whole).
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseChatCompletionRequest, requestedMaxTokens, type ChatCompletionRequest } from '../protocol/chat-request.js';
import { renderCompletion, type ReplyIdentity } from '../protocol/chat-response.js';
import { ApiError, checkContextWindow, modelNotFound, noHealthyUpstream } from '../protocol/errors.js';
import { readJsonBody, sendJson } from '../protocol/http-io.js';
import { firstHealthyEndpoint, markReachable, markUnreachable } from '../routing/endpoint-health.js';
import type { RoutedEndpoint, RoutedModel, RoutingTable } from '../routing/routing-table.js';
import { postChatCompletion, readCompletion, readStream, type UpstreamTimeouts } from '../upstream/client.js';
import { mergeCompletions, mergeStreams } from '../upstream/fan-out.js';
import { StreamRelay } from './stream-relay.js';

/** Prompt tokens counted here, or 0 where this model has no tokenizer (the upstream then judges). */
function countedPromptTokens(model: RoutedModel, request: ChatCompletionRequest): number {
  if (!model.countPromptTokens) return 0;
  const promptTokens = model.countPromptTokens(request.messages);
  checkContextWindow(model.config.contextWindow, promptTokens, requestedMaxTokens(request) ?? 1);
  return promptTokens;
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

function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && /^[\w.:-]{1,128}$/.test(given) ? given : randomUUID();
}

export async function handleChatCompletion(req: IncomingMessage, res: ServerResponse, table: RoutingTable): Promise<void> {
  const { settings } = table;
  const parsed = parseChatCompletionRequest(await readJsonBody(req, settings.maxBodyBytes));
  if (parsed instanceof ApiError) throw parsed;
  const request = parsed;
  const model = table.models.get(request.model);
  if (!model) throw modelNotFound(request.model);
  const promptTokens = countedPromptTokens(model, request);
  const endpoint = firstHealthyEndpoint(model);
  if (!endpoint) throw noHealthyUpstream(request.model, 2);

  const id = requestId(req);
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
        headers: { 'x-request-id': id },
        countedPromptTokens: promptTokens,
        clientGone: clientGone.signal,
      })
    : undefined;

  let bodies;
  try {
    bodies = await Promise.all(upstreamBodies(endpoint, model, request).map((b) => postChatCompletion(endpoint, b, clientGone.signal, timeouts)));
  } catch (err) {
    if (err instanceof ApiError && err.code === 'upstream_unreachable') markUnreachable(endpoint);
    if (err instanceof ApiError && relay?.failBeforeStart(err)) return;
    throw err;
  }
  markReachable(endpoint);

  if (!relay) {
    const parts = await Promise.all(bodies.map((b) => readCompletion(endpoint, b)));
    const completion = parts.length === 1 ? parts[0] : mergeCompletions(parts);
    sendJson(res, 200, renderCompletion(identity, completion), { 'x-request-id': id });
    return;
  }
  const streams = bodies.map((b) => readStream(endpoint, b));
  const outcome = await relay.run(streams.length === 1 ? streams[0] : mergeStreams(streams));
  if (outcome.kind === 'broke_off') console.warn(`parley: ${id}: ${endpoint.name}: stream broke off: ${outcome.reason}`);
}
