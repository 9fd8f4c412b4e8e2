// Sends a request upstream along the router's plan. An endpoint with a free
// slot is tried at once; a failure before its first byte (refused or dropped
// connection, 5xx, 429, first-byte timeout) moves on to the next, within the
// attempt budget and the deadline. When every endpoint is at capacity the
// request waits in the first queue with room. Once an upstream answers, its
// reply is the reply: nothing after the first byte fails over.
//
// A failed attempt counts against its endpoint's circuit once the request
// is over, and only when the endpoint is to blame: not when the request
// failed the same way everywhere it went (two endpoints answering it with
// the same 5xx: its content is the cause, and counting it would let one
// tenant's poison requests open a circuit every tenant shares). A failure
// that another endpoint then did not repeat is the endpoint's for certain.
import { SpanStatusCode, type Span } from '@opentelemetry/api';
import { ApiError, flexUnavailable, noHealthyUpstream, upstreamsBusy } from '../protocol/errors.js';
import type { ServiceTier } from '../protocol/service-tier.js';
import { QueueTimeout, type EndpointState } from '../routing/endpoint-state.js';
import type { RoutePlan } from '../routing/router.js';
import type { RoutedEndpoint, RoutedModel, RoutingTable } from '../routing/routing-table.js';
import type { Cancellation } from '../upstream/cancellation.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import { postUpstream, type UpstreamBody } from '../upstream/client.js';
import type { GatewayContext } from './context.js';

export interface UpstreamCall {
  endpoint: RoutedEndpoint;
  bodies: UpstreamBody[];
  /** Frees the endpoint's slot; call when the reply has been relayed. */
  release(): void;
}

/** W3C trace context for the upstream, so that an engine exporting its own traces (vLLM's OTLP) joins the request's; none when nothing is traced. */
function traceparentOf(span: Span): string | undefined {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return span.isRecording() ? `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}` : undefined;
}

/** A failure before the upstream's first byte that another endpoint may not share. */
const isRetryable = (err: unknown) => err instanceof ApiError && (err.code === 'upstream_unreachable' || err.code === 'upstream_error');

interface FailedAttempt {
  state: EndpointState;
  err: ApiError;
}

/** Whether every attempt was answered with one and the same 5xx, by two endpoints or more: then the request is the cause. */
function requestAtFault(failed: FailedAttempt[]): boolean {
  const status = failed[0]?.err.upstreamStatus;
  return failed.length >= 2 && status !== undefined && failed.every((f) => f.err.upstreamStatus === status);
}

/** Counts the failed attempts against their endpoints, unless the request itself was at fault; `served`: another endpoint then served it. */
function blame(failed: FailedAttempt[], account: string, served: boolean): void {
  const exonerated = !served && requestAtFault(failed);
  for (const { state, err } of failed) {
    if (exonerated) state.breaker.onNoVerdict();
    else state.recordFailure(account, err.code === 'upstream_unreachable', served);
  }
}

/** What one endpoint is sent for a request: the API's path under its base URL, and one body per call (a dialect may need one per choice). */
export interface UpstreamRequest {
  path: string;
  bodies: Record<string, unknown>[];
}

/** One request on its way upstream: what each endpoint is sent, along which plan, for which account, until when it is wanted. */
export interface Forwarding {
  model: RoutedModel;
  /** The settings of the routing table the request started on. */
  settings: RoutingTable['settings'];
  upstreamRequest(endpoint: RoutedEndpoint): UpstreamRequest;
  plan: RoutePlan;
  account: string;
  /** The tier the request is admitted at. */
  tier: ServiceTier;
  cancellation: Cancellation;
  /** Counts the attempts, for the request's log line. */
  record: RequestRecord;
}

export async function callWithFailover(ctx: GatewayContext, span: Span, forwarding: Forwarding): Promise<UpstreamCall> {
  const failed: FailedAttempt[] = [];
  try {
    const call = await walkPlan(ctx, span, forwarding, failed);
    blame(failed, forwarding.account, true);
    return call;
  } catch (err) {
    blame(failed, forwarding.account, false);
    throw err;
  }
}

async function walkPlan(ctx: GatewayContext, span: Span, forwarding: Forwarding, failed: FailedAttempt[]): Promise<UpstreamCall> {
  const { model, plan, account, tier, cancellation, settings } = forwarding;
  const modelId = model.config.id;
  const { maxAttempts, deadlineMs } = settings.failover;
  const queueTimeoutMs = tier === 'flex' ? settings.failover.flexQueueTimeoutMs : settings.failover.queueTimeoutMs;
  const retryAfter = Math.max(1, Math.ceil(settings.health.openMs / 1000));
  const busy = () => (tier === 'flex' ? flexUnavailable(modelId, retryAfter) : upstreamsBusy(modelId, retryAfter));
  if (plan.endpoints.length === 0) throw noHealthyUpstream(modelId, retryAfter);
  const deadline = Date.now() + deadlineMs;
  let attempts = 0;
  let lastError: unknown;

  // Holds a slot on `endpoint`; resolves to the call, or to undefined after a failure worth moving on from.
  const attempt = async (endpoint: RoutedEndpoint): Promise<UpstreamCall | undefined> => {
    const state = ctx.router.state(endpoint);
    if (!state.breaker.allowRequest()) {
      state.release(tier);
      return undefined;
    }
    attempts++;
    forwarding.record.attempts = attempts;
    const started = Date.now();
    const attemptSpan = ctx.telemetry.child(span, 'upstream attempt', { 'server.address': endpoint.url, 'gen_ai.provider.name': endpoint.kind, 'gen_ai.request.model': endpoint.upstreamModel, 'parley.attempt': attempts });
    const timeouts = { firstByteMs: Math.max(1, Math.min(settings.upstreamFirstByteTimeoutMs, deadline - started)), idleMs: settings.upstreamIdleTimeoutMs };
    try {
      const { path, bodies: sent } = forwarding.upstreamRequest(endpoint);
      const bodies = await Promise.all(sent.map((b) => postUpstream(endpoint, path, b, cancellation, timeouts, traceparentOf(attemptSpan))));
      state.recordSuccess(account, Date.now() - started);
      ctx.telemetry.recordUpstreamCall(forwarding.record, endpoint, (Date.now() - started) / 1000);
      attemptSpan.end();
      let released = false;
      return { endpoint, bodies, release: () => void (released || ((released = true), state.release(tier))) };
    } catch (err) {
      state.release(tier);
      const errorType = err instanceof ApiError ? (err.code ?? err.type) : 'aborted';
      ctx.telemetry.recordUpstreamCall(forwarding.record, endpoint, (Date.now() - started) / 1000, errorType);
      attemptSpan.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
      attemptSpan.end();
      if (cancellation.cancelled || !isRetryable(err)) {
        // The upstream answered (a 4xx is the request's fault, not the endpoint's), or its client left.
        if (err instanceof ApiError && !cancellation.cancelled) state.breaker.onSuccess(account);
        else state.breaker.onNoVerdict();
        throw err;
      }
      failed.push({ state, err: err as ApiError });
      console.warn(`parley: ${endpoint.name}: ${(err as Error).message}; trying the next endpoint`);
      lastError = err;
      return undefined;
    }
  };

  const full: RoutedEndpoint[] = [];
  for (const endpoint of plan.endpoints) {
    if (attempts >= maxAttempts || Date.now() >= deadline) break;
    if (!(await ctx.router.state(endpoint).tryAcquire(tier))) {
      full.push(endpoint);
      continue;
    }
    const call = await attempt(endpoint);
    if (call) return call;
  }
  for (const endpoint of full) {
    const state = ctx.router.state(endpoint);
    if (attempts >= maxAttempts || !state.hasQueueRoom(account)) continue;
    const wait = Math.min(queueTimeoutMs, deadline - Date.now());
    if (wait <= 0) break;
    try {
      await state.acquireQueued(account, tier, wait, cancellation);
    } catch (err) {
      if (err instanceof QueueTimeout) throw busy();
      throw err;
    }
    const call = await attempt(endpoint);
    if (call) return call;
  }
  throw lastError ?? busy();
}
