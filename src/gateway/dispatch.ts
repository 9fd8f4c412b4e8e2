// One request's way to its upstream: its plan and first endpoint's slot,
// asked for beside the credit hold, and the call along that plan. The plan
// and the slot wait on Redis as the hold does, in the same round trip:
// `node bench/revision-ab.mjs 88b18b7 whole 1 8 4` (88b18b7 asks after the
// hold) gave this 1.18 times the light-load requests/s (2026-11-26; rounds
// 1.18 1.13 1.19 1.06).
//
// The call itself starts beside the hold too where the hold is expected in
// full (gateway/hold-forecast.ts), so that at light load the hold's Redis
// round trip overlaps the upstream's first byte instead of coming before it.
// `node bench/revision-ab.mjs dc75b71 whole 1 8 8` (dc75b71 calls after the
// hold) gave this 1.20 times the light-load requests/s (2026-11-27; rounds
// 1.14 to 1.23, CPU per request 447 µs against 472).
//
// Nothing reaches the client before the hold is in. A hold refused cancels
// an early call; one granted for fewer reply tokens than the early call was
// sent with cancels it too, and the request is sent again with the lower
// limit. A key out of credit, over its rate limit or its budget so sends its
// upstream no work to throw away, beyond the one call per replica that finds
// out.
import type { Span } from '@opentelemetry/api';
import type { ServiceTier } from '../protocol/service-tier.js';
import type { RoutePlan } from '../routing/router.js';
import type { RoutedEndpoint, RoutedModel } from '../routing/routing-table.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import type { Cancellation } from '../upstream/cancellation.js';
import type { GatewayContext } from './context.js';
import type { Exchange } from './exchange.js';
import { callWithFailover, type UpstreamCall, type UpstreamRequest } from './failover.js';

/**
 * The request's plan, with its first endpoint's slot taken where one is free
 * there (`firstHeld`). The slot is the request's to give back until a
 * failover walk takes the plan (and the slot with it).
 */
class FirstSlot {
  private readonly route: Promise<{ plan: RoutePlan; firstHeld: boolean }>;
  private taken = false;

  constructor(private readonly ctx: GatewayContext, private readonly tier: ServiceTier, model: RoutedModel, affinityKey: () => string) {
    this.route = ctx.router.plan(model, affinityKey).then(async (plan) => {
      const first = plan.endpoints[0];
      return { plan, firstHeld: first !== undefined && (await ctx.router.state(first).tryAcquire(tier)) };
    });
    // Awaited only once the hold is in: a failure before then is not an unhandled one.
    this.route.catch(() => undefined);
  }

  /** The plan and its slot, for a failover walk, which from then on gives the slot back. */
  async take(): Promise<{ plan: RoutePlan; firstHeld: boolean }> {
    const route = await this.route;
    this.taken = true;
    return route;
  }

  /** The request ends before a walk took the slot: it goes back. */
  giveBack(): void {
    if (this.taken) return;
    void this.route.then((r) => r.firstHeld && this.ctx.router.state(r.plan.endpoints[0]).release(this.tier), () => undefined);
  }
}

/** What a dispatch needs to know of its request. */
export interface Dispatched<R> {
  model: RoutedModel;
  tier: ServiceTier;
  affinityKey(): string;
  /** Reply tokens per choice the request asks for, as a hold granted in full pays for them. */
  fullReplyTokens: number;
  /** The request as sent when `replyTokens` per choice are paid for. */
  requestFor(replyTokens: number): R;
  /** What `endpoint` is sent for `request`. */
  upstreamRequest(endpoint: RoutedEndpoint, request: R): UpstreamRequest;
}

export class Dispatch<R> {
  private slot: FirstSlot;
  private early: { request: R; call: Promise<UpstreamCall>; cancellation: Cancellation } | undefined;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly span: Span,
    private readonly record: RequestRecord,
    private readonly exchange: Exchange,
    private readonly request: Dispatched<R>,
  ) {
    this.slot = this.newSlot();
  }

  /** Calls the upstream now, before the hold is in, with the request as a hold granted in full sends it. */
  callEarly(): void {
    const request = this.request.requestFor(this.request.fullReplyTokens);
    const cancellation = this.exchange.upstreamCall.part();
    const call = this.send(request, cancellation);
    // Awaited only once the hold is in: a failure before then is not an unhandled one.
    call.catch(() => undefined);
    this.early = { request, call, cancellation };
  }

  /** The request sent and its call, once the hold pays for `replyTokens` per choice: the early call where it was sent for as many. */
  callFor(replyTokens: number): { request: R; call: Promise<UpstreamCall> } {
    if (this.early && replyTokens >= this.request.fullReplyTokens) return this.early;
    if (this.early) {
      this.dropEarly();
      this.slot = this.newSlot();
    }
    const request = this.request.requestFor(replyTokens);
    return { request, call: this.send(request, this.exchange.upstreamCall) };
  }

  /** The request is not served: an early call ends, and the slot goes back. */
  abandon(): void {
    this.dropEarly();
    this.giveBack();
  }

  /** The request ended before a failover walk took the slot: it goes back. */
  giveBack(): void {
    this.slot.giveBack();
  }

  private dropEarly(): void {
    if (!this.early) return;
    this.early.cancellation.cancel('early_call_abandoned');
    void this.early.call.then((call) => call.release(), () => undefined);
    this.early = undefined;
  }

  private newSlot(): FirstSlot {
    return new FirstSlot(this.ctx, this.request.tier, this.request.model, () => this.request.affinityKey());
  }

  private async send(request: R, cancellation: Cancellation): Promise<UpstreamCall> {
    const { plan, firstHeld } = await this.slot.take();
    const { table, caller } = this.exchange;
    const { model, tier } = this.request;
    return callWithFailover(this.ctx, this.span, {
      model, settings: table.settings, plan, firstHeld, account: caller.account, tier, cancellation, record: this.record,
      upstreamRequest: (endpoint) => this.request.upstreamRequest(endpoint, request),
    });
  }
}
