// POST /v1/embeddings through the same stages as chat: the shared front
// (authenticate, read, find a model that serves embeddings) → validate →
// rate limit and hold credit for the input at the input price → route and
// forward, failing over before the first byte → read the vectors through
// the dialect → reply → settle what the upstream counted.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import { embeddingInputs, parseEmbeddingsRequest, renderEmbeddings, type EmbeddingsRequest } from '../protocol/embeddings.js';
import { ApiError } from '../protocol/errors.js';
import { sendJson, sendJsonParts } from '../protocol/http-io.js';
import { readBytes, readWhole } from '../upstream/client.js';
import type { GatewayContext } from './context.js';
import { openExchange, servingModel } from './exchange.js';
import { callWithFailover, type UpstreamCall } from './failover.js';
import { Meter } from './metering.js';
import { randomId } from './random-ids.js';

/** The most tokens the input can be: token ids are counted, text is bounded by its UTF-8 bytes (a byte-level tokenizer never makes more). */
function inputTokensBound(req: EmbeddingsRequest): number {
  return embeddingInputs(req).reduce((sum, input) => sum + (typeof input === 'string' ? Buffer.byteLength(input) + 2 : input.length), 0);
}

export async function handleEmbeddings(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, id: string): Promise<void> {
  const { caller, body, table, upstreamCall, clientGone } = await openExchange(req, res, ctx);
  const request = parseEmbeddingsRequest(body);
  if (request instanceof ApiError) throw request;
  const model = servingModel(table, request.model, 'embeddings', span, caller);
  const meter = await Meter.open(ctx, span, { table, caller, model, settlementId: randomId(), clientIds: { requestId: id, replyId: '' }, promptTokens: inputTokensBound(request), n: 0, maxReplyTokens: 0, user: request.user ?? undefined, api: 'embeddings' });
  const first = embeddingInputs(request)[0];
  const plan = ctx.router.plan(model, () => (typeof first === 'string' ? first : first.join(' ')));
  let call: UpstreamCall | undefined;
  try {
    const upstreamRequest = (endpoint: UpstreamCall['endpoint']) => ({ path: '/embeddings', bodies: [endpoint.dialect.embeddingsBody(request, endpoint.upstreamModel)] });
    call = await callWithFailover(ctx, span, { model, settings: table.settings, upstreamRequest, plan, account: caller.account, cancellation: upstreamCall });
    const { endpoint } = call;
    const encoding = request.encoding_format ?? 'float';
    const headers = meter.rateLimitHeaders;
    const bytes = await readBytes(call.bodies[0]);
    const inPlace = endpoint.dialect.embeddingsInPlace(bytes, request.model, encoding);
    let promptTokens: number;
    if (inPlace) {
      sendJsonParts(res, inPlace.parts, headers);
      promptTokens = inPlace.promptTokens;
    } else {
      const reply = await readWhole(bytes.toString('utf8'), (json) => endpoint.dialect.embeddings(json));
      sendJson(res, 200, renderEmbeddings(request.model, reply, encoding), headers);
      promptTokens = reply.promptTokens;
    }
    const usage = { prompt_tokens: promptTokens, completion_tokens: 0, cached_tokens: 0 };
    ctx.telemetry.recordUsage(model.config.id, usage);
    meter.settle('complete', endpoint.name, usage);
  } catch (err) {
    throw meter.fail(err, call?.endpoint.name ?? '', clientGone());
  } finally {
    call?.release();
  }
}
