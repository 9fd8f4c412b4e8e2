// The gateway's HTTP server: routes each request to its handler and turns
// every failure into OpenAI's error body.
import type { Span } from '@opentelemetry/api';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { ApiError, internalError, openAiError, routeNotFound, shuttingDown } from '../protocol/errors.js';
import { cutOffWhenStalled, decodePathSegment, sendError, sendJson } from '../protocol/http-io.js';
import { ADMIN_PREFIX, handleAdmin } from './admin-api.js';
import { handleBatchApis } from './batch-routes.js';
import { getBalance } from './balance-route.js';
import { handleChatCompletion } from './chat-completions.js';
import { handleCompletion } from './completions.js';
import { handleEmbeddings } from './embeddings.js';
import { authenticate, requestIdOf } from './exchange.js';
import { countMessageTokens, handleMessages } from './messages.js';
import { handleResponses, storedResponse } from './responses.js';
import { anthropicError } from '../protocol/messages-response.js';
import type { GatewayContext } from './context.js';
import { getModel, listModels } from './models-routes.js';
import { handlePlatform } from '../platform/routes.js';
import { routeLabel } from '../telemetry/route-labels.js';
import { genAiSpanAttributes, writeRequestLog } from '../telemetry/request-log.js';
import type { RequestRecord } from '../telemetry/request-record.js';

/** Ready: not shutting down, and Redis answers (without it every request would fail closed). */
async function readiness(res: ServerResponse, ctx: GatewayContext): Promise<void> {
  if (ctx.lifecycle.draining) return sendJson(res, 503, { status: 'shutting down' });
  try {
    await ctx.redis.ping();
  } catch {
    return sendJson(res, 503, { status: 'redis unreachable' });
  }
  sendJson(res, 200, { status: 'ready' });
}

/** A request from an Anthropic client: Messages, or anything sent with Anthropic's version header (the models list). Its errors and lists take Anthropic's shape. */
const anthropicClient = (req: IncomingMessage, path: string) => path.startsWith('/v1/messages') || req.headers['anthropic-version'] !== undefined;

/**
 * A generation ended: its GenAI attributes on its span, its metrics, and its log line. A reply that broke off
 * mid-stream (the client left, or the upstream failed after the first byte) has a 200 status and an error type.
 */
function ended(ctx: GatewayContext, span: Span, record: RequestRecord, res: ServerResponse, errorCode: string | null, seconds: number): void {
  const errorType = errorCode ?? (res.statusCode >= 400 ? String(res.statusCode) : record.brokenOff);
  if (span.isRecording()) span.setAttributes(genAiSpanAttributes(record));
  // A request that failed before its exchange opened (no key) goes by the table in force now.
  const settings = record.settings ?? ctx.routing().settings;
  ctx.telemetry.recordGeneration(record, seconds, errorType, settings.metricsTopAccounts);
  if (settings.requestLog) writeRequestLog(record, res.statusCode, errorType, seconds);
}

/** Codex asks for its model catalog with its version in the query, and reads only that catalog's shape. */
const codexCatalogRequest = (search: string) => new URLSearchParams(search).has('client_version');

/** `servesMetrics`: GET /metrics here, where no port of its own serves it. */
export function createGatewayServer(ctx: GatewayContext, servesMetrics = true): Server {
  const route = async (req: IncomingMessage, res: ServerResponse, span: Span, record: RequestRecord, method: string, path: string, search: string) => {
    if (method === 'GET' && path === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (method === 'GET' && path === '/readyz') return readiness(res, ctx);
    if (servesMetrics && method === 'GET' && path === '/metrics') return ctx.telemetry.serveMetrics(req, res);
    if (ctx.lifecycle.draining) throw shuttingDown();
    return ctx.lifecycle.track(res, routeTracked(req, res, span, record, method, path, search));
  };
  /** The routes a shutdown waits for. */
  const routeTracked = async (req: IncomingMessage, res: ServerResponse, span: Span, record: RequestRecord, method: string, path: string, search: string) => {
    if (method === 'POST' && path === '/v1/chat/completions') return handleChatCompletion(req, res, ctx, span, record);
    if (method === 'POST' && path === '/v1/completions') return handleCompletion(req, res, ctx, span, record);
    if (method === 'POST' && path === '/v1/embeddings') return handleEmbeddings(req, res, ctx, span, record);
    if (method === 'POST' && path === '/v1/messages') return handleMessages(req, res, ctx, span, record);
    if (method === 'POST' && path === '/v1/messages/count_tokens') return countMessageTokens(req, res, ctx, span);
    if (method === 'POST' && path === '/v1/responses') return handleResponses(req, res, ctx, span, record);
    if ((method === 'GET' || method === 'DELETE') && path.startsWith('/v1/responses/')) return storedResponse(req, ctx, decodePathSegment(path.slice('/v1/responses/'.length)));
    if (path === '/admin/endpoints' || path.startsWith(ADMIN_PREFIX)) return handleAdmin(req, res, ctx, method, path, search);
    if (await handleBatchApis(req, res, ctx, method, path, search)) return;
    if (await handlePlatform(req, res, ctx, path, new URLSearchParams(search))) return;
    const authenticated = method === 'GET' && (path === '/v1/models' || path.startsWith('/v1/models/') || path === '/user/balance');
    if (!authenticated) throw routeNotFound(method, path);
    const caller = await authenticate(req, ctx);
    if (path === '/user/balance') return getBalance(res, ctx, caller);
    const shape = anthropicClient(req, path) ? 'anthropic' : codexCatalogRequest(search) ? 'codex' : 'openai';
    if (path === '/v1/models') return listModels(res, ctx.routing(), caller, shape);
    return getModel(res, ctx.routing(), caller, decodePathSegment(path.slice('/v1/models/'.length)), shape);
  };
  const { requestReadTimeoutMs } = ctx.routing().settings;
  // A request's own reading is timed (Node's requestTimeout, looked at every connectionsCheckingInterval); a reply,
  // however long it streams, is not.
  const timeouts = { requestTimeout: requestReadTimeoutMs, headersTimeout: requestReadTimeoutMs, connectionsCheckingInterval: Math.min(1000, requestReadTimeoutMs) };
  return createServer(timeouts, (req, res) => {
    const started = performance.now();
    const method = req.method ?? 'GET';
    const [path, search = ''] = (req.url ?? '/').split('?', 2);
    const name = routeLabel(method, path);
    // Every reply carries the request's id, errors included, so a client can quote it and find its usage event.
    const id = requestIdOf(req);
    res.setHeader('x-request-id', id);
    const errorShape = anthropicClient(req, path) ? anthropicError : openAiError;
    // Anthropic's clients read the id from their own header.
    if (errorShape === anthropicError) res.setHeader('request-id', id);
    const span = ctx.telemetry.tracer.startSpan(name, { attributes: { 'http.request.method': method, 'http.route': name, 'parley.request_id': id } });
    let errorCode: string | null = null;
    const record: RequestRecord = { id, attempts: 0 };
    res.once('close', () => {
      const seconds = (performance.now() - started) / 1000;
      span.setAttribute('http.response.status_code', res.statusCode);
      if (errorCode) span.setAttribute('parley.error_code', errorCode);
      if (record.api) ended(ctx, span, record, res, errorCode, seconds);
      span.end();
      if (name !== 'GET /metrics') ctx.telemetry.recordRequest(name, res.statusCode, errorCode, seconds);
    });
    route(req, res, span, record, method, path, search)
      .catch((err) => {
        if (!(err instanceof ApiError)) {
          if ((err as Error)?.name === 'AbortError') return void res.destroy();
          console.error('parley:', err);
        }
        const failure = err instanceof ApiError ? err : internalError();
        errorCode = failure.code;
        sendError(res, failure, errorShape);
      })
      .finally(() => cutOffWhenStalled(res, ctx.routing().settings.clientSendTimeoutMs));
  });
}
