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
import { bounded } from '../protocol/bounded-text.js';
import { ApiError, flexUnavailable, noHealthyUpstream, upstreamsBusy } from '../protocol/errors.js';
import type { ServiceTier } from '../protocol/service-tier.js';
import { QueueTimeout, type EndpointState, type Slot } from '../routing/endpoint-state.js';
import type { RoutePlan } from '../routing/router.js';
import type { RoutedEndpoint, RoutedModel, RoutingTable } from '../routing/routing-table.js';
import type { Cancellation } from '../upstream/cancellation.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import { postUpstream, type UpstreamBody } from '../upstream/client.js';
import type { GatewayContext } from './context.js';

export interface UpstreamCall {
  endpoint: RoutedEndpoint;
  bodies: UpstreamBody[];
  /** Frees the endpoint's slot; call when the reply has been relayed (once is enough; more do nothing). */
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
  const walk = new PlanWalk(ctx, span, forwarding);
  try {
    const call = await walk.run();
    blame(walk.failed, forwarding.account, true);
    return call;
  } catch (err) {
    blame(walk.failed, forwarding.account, false);
    throw err;
  }
}

/** One request's way along its plan: the endpoints with a free slot first, then a wait in the first queue with room. */
class PlanWalk {
  readonly failed: FailedAttempt[] = [];
  private attempts = 0;
  private lastError: unknown;
  private readonly deadline: number;
  private readonly settings: RoutingTable['settings'];

  constructor(
    private readonly ctx: GatewayContext,
    private readonly span: Span,
    private readonly forwarding: Forwarding,
  ) {
    this.settings = forwarding.settings;
    this.deadline = Date.now() + this.settings.failover.deadlineMs;
  }

  async run(): Promise<UpstreamCall> {
    const { plan, tier } = this.forwarding;
    if (plan.endpoints.length === 0) throw noHealthyUpstream(this.forwarding.model.config.id, this.retryAfter);
    const full: RoutedEndpoint[] = [];
    for (const endpoint of plan.endpoints) {
      if (!this.attemptsLeft() || Date.now() >= this.deadline) break;
      const slot = await this.ctx.router.state(endpoint).tryAcquire(tier);
      if (!slot) {
        full.push(endpoint);
        continue;
      }
      const call = await this.attempt(endpoint, slot);
      if (call) return call;
    }
    for (const endpoint of full) {
      if (!this.attemptsLeft() || !this.ctx.router.state(endpoint).hasQueueRoom(this.forwarding.account, this.forwarding.tier)) continue;
      const wait = Math.min(this.queueTimeoutMs, this.deadline - Date.now());
      if (wait <= 0) break;
      const call = await this.attempt(endpoint, await this.waitInQueue(endpoint, wait));
      if (call) return call;
    }
    throw this.lastError ?? this.busy();
  }

  private attemptsLeft(): boolean {
    return this.attempts < this.settings.failover.maxAttempts;
  }

  private get retryAfter(): number {
    return Math.max(1, Math.ceil(this.settings.health.openMs / 1000));
  }

  private get queueTimeoutMs(): number {
    return this.forwarding.tier === 'flex' ? this.settings.failover.flexQueueTimeoutMs : this.settings.failover.queueTimeoutMs;
  }

  private busy(): ApiError {
    const modelId = this.forwarding.model.config.id;
    return this.forwarding.tier === 'flex' ? flexUnavailable(modelId, this.retryAfter) : upstreamsBusy(modelId, this.retryAfter);
  }

  private async waitInQueue(endpoint: RoutedEndpoint, wait: number): Promise<Slot> {
    const { account, tier, cancellation } = this.forwarding;
    try {
      return await this.ctx.router.state(endpoint).acquireQueued(account, tier, wait, cancellation);
    } catch (err) {
      throw err instanceof QueueTimeout ? this.busy() : err;
    }
  }

  /** With `slot` held on `endpoint`: the call, which releases the slot, or undefined after a failure worth moving on from. */
  private async attempt(endpoint: RoutedEndpoint, slot: Slot): Promise<UpstreamCall | undefined> {
    const { cancellation, record } = this.forwarding;
    const state = this.ctx.router.state(endpoint);
    if (!state.breaker.allowRequest()) {
      slot.release();
      return undefined;
    }
    record.attempts = ++this.attempts;
    const started = Date.now();
    const attemptSpan = this.ctx.telemetry.child(this.span, 'upstream attempt', {
      'server.address': endpoint.url, 'gen_ai.provider.name': endpoint.kind, 'gen_ai.request.model': endpoint.upstreamModel, 'parley.attempt': this.attempts,
    });
    const timeouts = { firstByteMs: Math.max(1, Math.min(this.settings.upstreamFirstByteTimeoutMs, this.deadline - started)), idleMs: this.settings.upstreamIdleTimeoutMs };
    try {
      const { path, bodies: sent } = this.forwarding.upstreamRequest(endpoint);
      const sentAt = performance.now();
      const bodies = await this.sendAll(endpoint, path, sent, timeouts, traceparentOf(attemptSpan));
      if (record.arrivedAt !== undefined) {
        record.sentMs = sentAt - record.arrivedAt;
        record.answeredMs = performance.now() - record.arrivedAt;
      }
      state.recordSuccess(this.forwarding.account, Date.now() - started);
      this.ctx.telemetry.recordUpstreamCall(record, endpoint, (Date.now() - started) / 1000);
      attemptSpan.end();
      return { endpoint, bodies, release: () => slot.release() };
    } catch (err) {
      slot.release();
      const errorType = err instanceof ApiError ? (err.code ?? err.type) : (cancellation.reason ?? 'aborted');
      this.ctx.telemetry.recordUpstreamCall(record, endpoint, (Date.now() - started) / 1000, errorType);
      attemptSpan.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
      attemptSpan.end();
      this.afterFailure(endpoint, state, err);
      return undefined;
    }
  }

  /**
   * The calls of one attempt (several where `n` or a batch of prompts fans out), each to its first byte. When one
   * fails, the others are cancelled: left alone, they would go on generating, unread and unbilled, while the
   * request fails over and sends them again elsewhere.
   */
  private async sendAll(endpoint: RoutedEndpoint, path: string, sent: Record<string, unknown>[], timeouts: { firstByteMs: number; idleMs: number }, traceparent: string | undefined): Promise<UpstreamBody[]> {
    const { cancellation } = this.forwarding;
    if (sent.length === 1) return [await postUpstream(endpoint, path, sent[0], cancellation, timeouts, traceparent)];
    const siblings = cancellation.part();
    try {
      return await Promise.all(sent.map((b) => postUpstream(endpoint, path, b, siblings, timeouts, traceparent)));
    } catch (err) {
      siblings.cancel('sibling_failed');
      throw err;
    }
  }

  /** Throws what the caller should see, unless the failure is one another endpoint may not share. */
  private afterFailure(endpoint: RoutedEndpoint, state: EndpointState, err: unknown): void {
    const { cancellation, account } = this.forwarding;
    if (cancellation.cancelled || !isRetryable(err)) {
      // The upstream answered (a 4xx is the request's fault, not the endpoint's), or its client left.
      if (err instanceof ApiError && !cancellation.cancelled) state.breaker.onSuccess(account);
      else state.breaker.onNoVerdict();
      throw err;
    }
    this.failed.push({ state, err: err as ApiError });
    console.warn(`parley: ${endpoint.name}: ${bounded((err as Error).message)}; trying the next endpoint`);
    this.lastError = err;
  }
}
