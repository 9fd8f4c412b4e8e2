// Credit for one request: hold the most it can cost before any upstream
// call, keep the hold alive while the request is served, and settle it once
// at the end: charged for a complete reply, released for anything else.
import type { Span } from '@opentelemetry/api';
import type { Caller } from '../accounts/key-authenticator.js';
import type { ClientApi } from '../config.js';
import { extendHold, type BatchLineResult, type SettleOutcome, type Settlement } from '../billing/credit-ledger.js';
import { formatMicros, replyCost } from '../billing/prices.js';
import { bounded } from '../protocol/bounded-text.js';
import type { ServiceTier } from '../protocol/service-tier.js';
import type { Usage } from '../protocol/chat-response.js';
import { ApiError, insufficientBalance, keyBudgetSpent, RequestTooLarge, shuttingDown } from '../protocol/errors.js';
import { budgetPeriodField, budgetRenewsAt } from '../accounts/api-keys.js';
import { redisKeys } from '../redis/keys.js';
import { limitsOf, rateCheck } from '../ratelimit/rate-limiter.js';
import { failClosed } from './fail-closed.js';
import { HoldNotSent } from '../billing/hold-queue.js';
import type { RoutedModel, RoutingTable } from '../routing/routing-table.js';
import type { GatewayContext } from './context.js';
import { rateLimitHeaders, rateLimitRefusal } from './rate-limit-headers.js';

export interface MeterRequest {
  /** The routing table the request started on: its hold TTL and default rate limits, whatever a reload brings meanwhile. */
  table: RoutingTable;
  caller: Caller;
  model: RoutedModel;
  /** The id the hold and its settlement are filed under; unique per request. */
  settlementId: string;
  /** The ids the client was given, for the usage event. */
  clientIds: { requestId: string; replyId: string };
  promptTokens: number;
  n: number;
  maxReplyTokens: number;
  /** The end user the client named (`user`), recorded on the usage event whatever the upstream takes. */
  user?: string;
  /** The API the request came through, for the usage event. */
  api: ClientApi;
  /** The service tier that serves it: its prices are held and charged. */
  tier: ServiceTier;
}

const NO_USAGE: Usage = { prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0 };

/** Whether a hold that failed may have been made: anything but one never sent. */
const holdMayStand = (err: unknown) => !(err instanceof HoldNotSent);

/** The settlement of a metered request: only a complete reply is charged. */
function settlementOf(m: MeterRequest, outcome: SettleOutcome, endpoint: string, usage: Usage, reason: string | undefined, batchResult?: BatchLineResult): Settlement {
  return {
    batchResult,
    account: m.caller.account,
    keyId: m.caller.keyId,
    requestId: m.settlementId,
    clientIds: m.clientIds,
    model: m.model.config.id,
    endpoint,
    outcome,
    reason: reason === undefined ? undefined : bounded(reason),
    user: m.user,
    api: m.api,
    tier: m.tier,
    usage,
    cost: outcome === 'complete' ? replyCost(m.model.prices[m.tier], usage) : 0,
  };
}

export class Meter {
  private readonly heartbeat: NodeJS.Timeout;
  private settled = false;
  /** Resolves once the settlement has landed in Redis. */
  landed: Promise<void> = Promise.resolve();

  private constructor(
    private readonly ctx: GatewayContext,
    private readonly span: Span,
    private readonly m: MeterRequest,
    /** Reply tokens per choice the balance pays for: the request's own limit or fewer. */
    readonly maxReplyTokens: number,
    /** OpenAI's `x-ratelimit-*` headers for the reply. */
    readonly rateLimitHeaders: Record<string, string>,
    /** The hold as telemetry counts it. */
    private readonly openHold: { openedAt: number },
  ) {
    const ttl = m.table.billing.holdTtlMs;
    this.heartbeat = setInterval(() => {
      extendHold(ctx.redis, m.caller.account, m.settlementId, ttl).catch(() => {});
    }, Math.max(100, Math.floor(ttl / 3)));
    this.heartbeat.unref();
  }

  /**
   * Opens the request's meter once its hold is in. The hold counts the
   * request against its account's rate limit and holds credit for it, in one
   * script call shared with the holds asked for in the same turn: 429 when
   * the account's rate limit or the key's budget is spent, 402 when the available balance
   * pays for none of it, 503 when Redis is unreachable.
   */
  static async open(ctx: GatewayContext, span: Span, m: MeterRequest): Promise<Meter> {
    const rate = rateCheck(m.caller.account, limitsOf(m.caller.limits, m.table.rateLimits), m.promptTokens + m.n * m.maxReplyTokens);
    const [, tokensLimit, tokens] = rate.args;
    if (tokens > tokensLimit) throw new RequestTooLarge(tokensLimit, tokens);
    const { table } = m;
    const { budget } = m.caller;
    const now = Date.now();
    const asked = ctx.holds.hold({
      hold: {
        account: m.caller.account,
        requestId: m.settlementId,
        ttlMs: table.billing.holdTtlMs,
        prices: m.model.prices[m.tier],
        promptTokens: m.promptTokens,
        n: m.n,
        maxReplyTokens: m.maxReplyTokens,
        budget: budget ? { key: redisKeys.keyBudget(m.caller.account, m.caller.keyId), limit: budget.limit, periodField: budgetPeriodField(budget.period, now) } : undefined,
      },
      rate,
    });
    // The request is refused (503) when its hold may not stand: one its replicas did not take in time, or one whose
    // answer was lost with its connection (a primary killed mid-call, whose replica may have it). Such a hold is
    // released; releasing one never made changes nothing. One never sent (Redis away) needs no release.
    asked.catch((err) => holdMayStand(err) && void ctx.settlements.settle(settlementOf(m, 'failed', '', NO_USAGE, (err as Error).message)));
    // The hold's span: how long the request waited on Redis for its credit.
    const holdSpan = ctx.telemetry.child(span, 'credit hold', { 'parley.prompt_tokens': m.promptTokens, 'parley.max_reply_tokens': m.maxReplyTokens });
    const hold = await failClosed(asked).finally(() => holdSpan.end());
    if (hold.kind !== 'held') ctx.refusals.heardHold(m.caller, hold);
    if (hold.kind === 'rate_limited') throw rateLimitRefusal(hold.over, hold.rate);
    if (hold.kind === 'over_budget') throw keyBudgetSpent(formatMicros(budget!.limit), budget!.period, budgetRenewsAt(budget!.period, now));
    if (hold.kind !== 'held') throw insufficientBalance();
    return new Meter(ctx, span, m, hold.maxReplyTokens, rateLimitHeaders(hold.rate), ctx.telemetry.holdOpened());
  }

  /**
   * Settles, unpaid, a request whose upstream call failed or whose client
   * left; returns what to answer with (a replica shutting down says so,
   * rather than passing on the cancellation its shutdown caused).
   */
  fail(err: unknown, endpoint: string, clientGone: boolean): unknown {
    this.settle(clientGone ? 'client_gone' : 'failed', endpoint, undefined, (err as Error).message);
    return this.ctx.lifecycle.stopped && !(err instanceof ApiError) ? shuttingDown() : err;
  }

  /**
   * Settles once; later calls are ignored. Only a complete reply is charged, and a batch line's result written
   * with its charge. Returns what the reply costs (micro-units).
   */
  settle(outcome: SettleOutcome, endpoint: string, usage: Usage = NO_USAGE, reason?: string, batchResult?: BatchLineResult): number {
    if (this.settled) return 0;
    this.settled = true;
    clearInterval(this.heartbeat);
    this.ctx.telemetry.holdClosed(this.openHold);
    const settleSpan = this.ctx.telemetry.child(this.span, 'settle', {
      'parley.outcome': outcome,
      'parley.prompt_tokens': usage.prompt_tokens,
      'parley.cached_tokens': usage.cached_tokens,
      'parley.completion_tokens': usage.completion_tokens,
    });
    const settlement = settlementOf(this.m, outcome, endpoint, usage, reason, batchResult);
    if (settlement.cost > 0) this.ctx.telemetry.recordCharge(settlement.model, settlement.cost);
    this.landed = this.ctx.settlements.settle(settlement);
    // The span lasts until the settlement has landed in Redis, retries included.
    void this.landed.then(() => settleSpan.end());
    return settlement.cost;
  }
}
