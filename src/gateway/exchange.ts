// The stages every API's request goes through before its own: the
// cancellation of its upstream call (when the client leaves, even while its
// hold is on the way, or when shutdown's grace period is over), the caller's
// key, the body, and the model, which must serve the API asked for. Also the
// request's id, which the server gives every reply.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import type { Caller } from '../accounts/key-authenticator.js';
import type { ApiName } from '../config.js';
import { apiNotServed, invalidApiKey, modelNotFound } from '../protocol/errors.js';
import { readJsonBody } from '../protocol/http-io.js';
import { countRequest, limitsOf, rateCheck } from '../ratelimit/rate-limiter.js';
import { findModel, type RoutedModel, type RoutingTable } from '../routing/routing-table.js';
import { Cancellation } from '../upstream/cancellation.js';
import type { GatewayContext } from './context.js';
import { failClosed } from './fail-closed.js';
import { randomId } from './random-ids.js';
import { rateLimitRefusal } from './rate-limit-headers.js';

export interface Exchange {
  caller: Caller;
  table: RoutingTable;
  /** The body as JSON, not yet checked against the API's schema. */
  body: unknown;
  /** The request's headers (a batch line has none). */
  headers: IncomingHttpHeaders;
  upstreamCall: Cancellation;
  clientGone(): boolean;
}

/** The key as `Authorization: Bearer`, or as Anthropic's clients send it, `x-api-key`. */
function credentialOf(req: IncomingMessage): string | undefined {
  const apiKey = req.headers['x-api-key'];
  return req.headers.authorization ?? (typeof apiKey === 'string' ? `Bearer ${apiKey}` : undefined);
}

/** The caller its key names: a 401 for a key refused, a 503 when Redis cannot be reached. */
export async function authenticate(req: IncomingMessage, ctx: GatewayContext): Promise<Caller> {
  const outcome = await failClosed(ctx.keys.authenticate(credentialOf(req)));
  if ('refused' in outcome) throw invalidApiKey(outcome.refused);
  return outcome;
}

/** The request's id: the client's `x-request-id` (or `x-client-request-id`, as OpenAI's clients name it) when it is a sensible one, else a random one. */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'] ?? req.headers['x-client-request-id'];
  return typeof given === 'string' && /^[\w.:-]{1,128}$/.test(given) ? given : randomId();
}

/**
 * Before a body is read: the refusal the caller's account is known to get, on its turn, for a request that `spends`
 * credit or not (gateway/known-refusals.ts); undefined, at once, for an account with none known.
 */
export function knownRefusal(ctx: GatewayContext, caller: Caller, table: RoutingTable, spends: boolean): Promise<void> | undefined {
  return ctx.refusals.refusalBeforeBody(caller, table.rateLimits, spends);
}

/** Counts a request that holds no credit (count_tokens, a batch API's call) in its account's window: the 429 when it is full, remembered. */
export async function countInWindow(ctx: GatewayContext, caller: Caller, table: RoutingTable): Promise<void> {
  const window = await failClosed(countRequest(ctx.redis, rateCheck(caller.account, limitsOf(caller.limits, table.rateLimits), 0)));
  if (!window.full) return;
  ctx.refusals.heardWindow(caller.account, window.use);
  throw rateLimitRefusal('requests', window.use);
}

/** `spends`: whether the request holds credit (count_tokens does not: an account without credit may count). */
export async function openExchange(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, spends = true): Promise<Exchange> {
  const upstreamCall = new Cancellation();
  let clientGone = false;
  res.once('close', () => {
    if (res.writableFinished) return;
    clientGone = true;
    upstreamCall.cancel();
  });
  ctx.lifecycle.onStop(res, () => upstreamCall.cancel());
  const caller = await authenticate(req, ctx);
  const table = ctx.routing();
  const known = knownRefusal(ctx, caller, table, spends);
  if (known) await known;
  const body = await readJsonBody(req, table.settings.maxBodyBytes, ctx.bodies.allowance(caller.account, res));
  return { caller, table, body, headers: req.headers, upstreamCall, clientGone: () => clientGone };
}

/**
 * The model `id` names, if the caller's key may call it and it serves `api`:
 * otherwise the 404 for a model that does not exist or that the key may not
 * call (OpenAI's answer to both, which tells a key nothing of models it may
 * not use), or the 400 for an API the model does not serve.
 */
export function servingModel(table: RoutingTable, id: string, api: ApiName, span: Span, caller: Caller): RoutedModel {
  const model = findModel(table, id);
  if (!model || (caller.models !== null && !caller.models.includes(model.config.id))) throw modelNotFound(id);
  if (!model.config.api.includes(api)) throw apiNotServed(id, api, model.config.api);
  span.setAttribute('parley.model', model.config.id);
  return model;
}
