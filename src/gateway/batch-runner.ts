// Runs batch lines on this replica, beside every other replica: it claims
// lines from the fleet's batches (a few lines at a time, each account in
// turn), runs each through the same request path as a client's request
// (api-path.ts), at the flex tier and as the key that made the batch,
// and renews the leases of the lines it runs. Flex is admitted only to room
// the other tiers leave (routing/admission-rule.ts), so a batch fills idle
// slots and waits while interactive traffic needs them.
//
// A line that cannot run now (no flex room before its wait ended, its
// account's rate window half full, which is as far as its lines may fill it,
// a replica stopping, Redis away) goes back to the front of its queue and
// its batch waits a little; a line the API refuses or the
// upstream fails gets that error as its result. A reply's result is written
// by the settlement that charges it; its line ends only once that landed.
import type { Span } from '@opentelemetry/api';
import { balanceSummary } from '../billing/credit-ledger.js';
import type { ClientApi } from '../config.js';
import { ApiError, Cancelled, internalError, RequestTooLarge } from '../protocol/errors.js';
import { OPENAI_BATCH_ENDPOINTS } from '../protocol/openai-batches.js';
import { batchLineLimits, limitsOf } from '../ratelimit/rate-limiter.js';
import { redisKeys } from '../redis/keys.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import { writeRequestLog } from '../telemetry/request-log.js';
import { Cancellation } from '../upstream/cancellation.js';
import { serveBatchLine, type ApiDescriptor, type LineReply } from './api-path.js';
import { chat } from './chat-completions.js';
import { completions } from './completions.js';
import type { GatewayContext } from './context.js';
import { embeddings } from './embeddings.js';
import { messages } from './messages.js';
import { randomId } from './random-ids.js';
import { responses } from './responses.js';
import { activeMember, claimLines, endLine, hasEnded, keepMsOf, MAX_TRIES, releaseLine, renewLeases, retireActive, type BatchApi, type BatchCall, type BatchStatus, type ClaimedLine } from '../batches/batch-store.js';
import { activeBatches, lineTotals, type BatchLineTotals } from '../batches/batch-progress.js';
import { finalizeBatch } from '../batches/batch-results.js';
import { LINE_FORMATS } from '../batches/line-formats.js';

/** How often the runner looks for lines when it has room and found none. */
const IDLE_POLL_MS = 250;
/** How often a page of the fleet's active batches is read. */
const ACTIVE_READ_EVERY_MS = 1_000;
/**
 * Entries of the fleet's active set read at once. A fleet with more is read a page a second, in turn: read whole,
 * 100,000 batches held Redis 14 ms a reading, every replica every second, and every other team's requests with it.
 */
const ACTIVE_PAGE = 1_000;
/**
 * Lines of this replica's that may wait for an endpoint's slot at once: more are claimed as these are admitted,
 * so the batches keep every slot flex may take busy, on engines of any size; and no more wait, since a line
 * waiting holds its credit and its lease without using them.
 */
const WAITING_LINES = 8;
/** Lines claimed from one batch at a time, so that the batches of several teams take turns. */
const CLAIM_AT_ONCE = 8;
/** How long the fleet's queue keeps an entry whose batch is not stored: one being stored now has its hash by then. */
const UNSTORED_KEPT_MS = 60_000;
/** How long a batch waits after a line of it could not run now, or after a claim found none to run. */
const BACKOFF_MS = 1_000;
/** How long a reading of the fleet's batch totals answers /metrics: scrapers asking at once share one. */
const TOTALS_KEPT_MS = 2_000;

/** Failures that say "not now" rather than "not this line": the line goes back to its queue (a request too large for any minute's window is "not this line"). */
const NOT_NOW = new Set(['resource_unavailable', 'rate_limit_exceeded', 'queue_full', 'upstream_unavailable', 'shutting_down', 'service_unavailable']);

// Each API's descriptor, whatever its request type: the runner hands a line's body to the API its endpoint names.
const API_OF: Record<ClientApi, ApiDescriptor<any, any>> = { chat, completions, embeddings, messages, responses };

/** The API a batch's lines go to: its endpoint's, or Anthropic's Messages. */
export const lineApi = (api: BatchApi, endpoint: string): ClientApi => (api === 'anthropic' ? 'messages' : OPENAI_BATCH_ENDPOINTS[endpoint as keyof typeof OPENAI_BATCH_ENDPOINTS]);

interface RunningLine {
  account: string;
  batch: string;
  member: string;
  cancellation: Cancellation;
  /** The line's request: its attempts say whether it has had an endpoint's slot yet. */
  record: RequestRecord;
}

/** A batch in the fleet's queue: its member there, when it was queued, and until when this replica leaves it be. */
interface QueuedBatch {
  member: string;
  queuedAt: number;
  waitUntil: number;
}

/** A batch as its create or cancel returns it. */
interface MadeBatch {
  account: string;
  id: string;
  status: BatchStatus;
  times: { created: number | null };
}

/** A batch whose lines run here: whose, which, and what they call. */
interface ActiveBatch extends BatchCall {
  account: string;
  id: string;
}

export class BatchRunner {
  private readonly running = new Set<RunningLine>();
  private readonly token = randomId();
  private turn = 0;
  /**
   * The fleet's active batches as this replica knows them, by account: learned from the pages it reads and the
   * batches made here, and forgotten as each is retired (by a claim that finds its batch ended or gone, here or on
   * another replica).
   */
  private readonly known = new Map<string, Map<string, QueuedBatch>>();
  /** The rank of the next page of the fleet's active set to read, and when the last was read. */
  private cursor = 0;
  private readAt = 0;
  private stopping = false;
  private ticking = false;
  private readonly poll: NodeJS.Timeout;
  private readonly renewal: NodeJS.Timeout;
  private totals: { readAt: number; read: Promise<BatchLineTotals> } | undefined;

  constructor(private readonly ctx: GatewayContext) {
    this.poll = setInterval(() => this.fill(), IDLE_POLL_MS);
    this.poll.unref();
    this.renewal = setInterval(() => void this.renew(), Math.floor(this.settings().leaseMs / 3));
    this.renewal.unref();
  }

  /**
   * The fleet's batch lines by state, read when /metrics is scraped: each reading reads every active batch (up to a
   * thousand), which a timer on every replica would do whether anyone looked or not.
   */
  fleetTotals(): Promise<BatchLineTotals> {
    if (!this.totals || Date.now() - this.totals.readAt >= TOTALS_KEPT_MS) this.totals = { readAt: Date.now(), read: activeBatches(this.ctx.redis).then(lineTotals) };
    return this.totals.read;
  }

  private settings() {
    return this.ctx.routing().settings.batches;
  }

  /** Lines running on this replica now. */
  get linesRunning(): number {
    return this.running.size;
  }

  /** Lines of this replica's not yet given an endpoint's slot. */
  private get linesWaiting(): number {
    let waiting = 0;
    for (const line of this.running) if (line.record.attempts === 0) waiting++;
    return waiting;
  }

  /** How many more lines this replica may claim now. */
  private room(): number {
    return Math.min(this.settings().concurrency - this.running.size, WAITING_LINES - this.linesWaiting);
  }

  /** A batch was made or cancelled here: it is known at once, and runs (or ends) without waiting for a page's turn. */
  wake(batch: MadeBatch): void {
    if (!hasEnded(batch.status) && batch.times.created !== null) this.learn(batch.account, activeMember(batch.account, batch.id), batch.times.created);
    this.fill();
  }

  private learn(account: string, member: string, queuedAt: number): void {
    const batches = this.known.get(account) ?? this.known.set(account, new Map()).get(account)!;
    if (!batches.has(member)) batches.set(member, { member, queuedAt, waitUntil: 0 });
  }

  /** Claims lines while this replica has room for more. */
  fill(): void {
    // With Redis away there is nothing to claim, and nothing to say about it each time.
    if (this.ticking || this.stopping || this.room() <= 0 || this.ctx.redis.status !== 'ready') return;
    this.ticking = true;
    this.claimRound()
      .catch((err) => this.stopping || console.warn(`parley: batch lines not claimed: ${(err as Error).message}`))
      .finally(() => (this.ticking = false));
  }

  /**
   * One round: each account with active batches in turn (so a team with many batches gets no more turns than a
   * team with one), from one of its batches, a different one each round.
   */
  private async claimRound(): Promise<void> {
    if (Date.now() - this.readAt >= ACTIVE_READ_EVERY_MS) await this.readPage();
    const accounts = [...this.known.keys()];
    const now = Date.now();
    const turn = this.turn++;
    for (let i = 0; i < accounts.length; i++) {
      const batches = [...(this.known.get(accounts[(turn + i) % accounts.length])?.values() ?? [])];
      for (let j = 0; j < batches.length; j++) {
        const room = this.room();
        if (room <= 0 || this.stopping) return;
        const queued = batches[(turn + j) % batches.length];
        if (queued.waitUntil > now) continue;
        await this.claimFrom(queued, Math.min(room, CLAIM_AT_ONCE));
        break;
      }
    }
  }

  /**
   * The next page of the fleet's active set, oldest first, and from the first again after the last. A batch retired
   * between two pages moves the later ones up, so one may be passed over until the next time round; none is
   * forgotten for that, only when retired.
   */
  private async readPage(): Promise<void> {
    this.readAt = Date.now();
    const read = await this.ctx.redis.zrange(redisKeys.activeBatches, this.cursor, this.cursor + ACTIVE_PAGE - 1, 'WITHSCORES');
    for (let i = 0; i < read.length; i += 2) {
      const member = read[i];
      this.learn(member.slice(0, member.indexOf(' ')), member, Number(read[i + 1]));
    }
    this.cursor = read.length < 2 * ACTIVE_PAGE ? 0 : this.cursor + ACTIVE_PAGE;
  }

  /** A batch has nothing left to run: out of the fleet's active set and its account's count, and out of what this replica knows. */
  private async retire(account: string, id: string): Promise<void> {
    await retireActive(this.ctx.redis, account, id);
    const batches = this.known.get(account);
    batches?.delete(activeMember(account, id));
    if (batches?.size === 0) this.known.delete(account);
  }

  private async claimFrom(queued: QueuedBatch, count: number): Promise<void> {
    const { redis } = this.ctx;
    const { member, queuedAt } = queued;
    const [account, id] = member.split(' ');
    const claim = await claimLines(redis, account, id, count, this.settings().leaseMs, this.token);
    if (claim.kind === 'ended' || (claim.kind === 'gone' && Date.now() - queuedAt > UNSTORED_KEPT_MS)) return this.retire(account, id);
    if (claim.kind === 'finalize') {
      await finalizeBatch(redis, account, id, keepMsOf(this.settings()));
      return this.retire(account, id);
    }
    // Nothing to claim: its lines all run (here or elsewhere), or it is still being stored. Asked again at each poll,
    // every such batch of every account cost a round trip four times a second.
    if (claim.kind === 'gone' || claim.lines.length === 0) return void (queued.waitUntil = Date.now() + BACKOFF_MS);
    const batch: ActiveBatch = { account, id, ...claim.batch! };
    for (const line of claim.lines) void this.run(batch, line);
  }

  /** Leaves a batch this replica knows for `ms` before it claims from it again (0: from the next round). */
  private leave(batch: ActiveBatch, ms: number): void {
    const queued = this.known.get(batch.account)?.get(activeMember(batch.account, batch.id));
    if (queued) queued.waitUntil = ms === 0 ? 0 : Date.now() + ms;
  }

  private async run(batch: ActiveBatch, claimed: ClaimedLine): Promise<void> {
    const { ctx } = this;
    const requestId = randomId();
    const running: RunningLine = { account: batch.account, batch: batch.id, member: `${claimed.line}:${this.token}`, cancellation: new Cancellation(), record: { id: requestId, attempts: 0 } };
    this.running.add(running);
    const format = LINE_FORMATS[batch.api];
    // A line ended here: its batch may be drained now (to be finalized), so it is looked at in the next round.
    const end = async (failure = '') => {
      await endLine(ctx.redis, batch.account, batch.id, running.member, claimed.line, failure);
      this.leave(batch, 0);
    };
    try {
      if (!claimed.stored) return void (await end());
      const { customId } = claimed.stored;
      if (claimed.tries > MAX_TRIES) return void (await end(format.lost(customId, requestId)));
      const outcome = await this.serve(batch, claimed, running);
      if (outcome === 'not now') {
        this.leave(batch, BACKOFF_MS);
        await releaseLine(ctx.redis, batch.account, batch.id, running.member, claimed.line);
      } else await end(outcome instanceof ApiError ? format.failed(customId, requestId, outcome) : '');
    } catch (err) {
      // Redis away while ending the line: its lease lapses, and the line runs again (its result, if written, stands).
      console.warn(`parley: batch ${batch.id} line ${claimed.line}: ${(err as Error).message}`);
    } finally {
      this.running.delete(running);
      this.fill();
    }
  }

  /** Runs one line: 'done' once its result and charge landed, the error that is its result, or 'not now'. */
  private async serve(batch: ActiveBatch, claimed: ClaimedLine, { cancellation, record }: RunningLine): Promise<'done' | 'not now' | ApiError> {
    const { ctx } = this;
    const { customId, body } = claimed.stored!;
    const format = LINE_FORMATS[batch.api];
    const requestId = record.id;
    const api = API_OF[lineApi(batch.api, batch.endpoint)];
    const span = ctx.telemetry.tracer.startSpan(`batch ${api.name}`, { attributes: { 'parley.request_id': requestId, 'parley.batch_id': batch.id } });
    const started = performance.now();
    let errorType: string | undefined;
    let status = 200;
    try {
      const caller = await ctx.keys.callerOfKeyId(batch.keyId);
      if ('refused' in caller) throw new ApiError(401, 'authentication_error', caller.refused, 'invalid_api_key');
      // A batch runs at flex, whatever its lines ask, and reads its replies whole.
      const { stream: _stream, service_tier: _tier, ...lineBody } = body;
      const table = ctx.routing();
      const limits = batchLineLimits(limitsOf(caller.limits, table.rateLimits));
      const exchange = { caller: { ...caller, tier: 'flex' as const, limits }, table, body: lineBody, headers: {}, upstreamCall: cancellation, clientGone: () => false };
      const reply: LineReply = { result: (text) => ({ resultsKey: redisKeys.batch(batch.account, batch.id).results, line: claimed.line, result: format.succeeded(customId, requestId, text) }) };
      record.settings = table.settings;
      await serveBatchLine(api, exchange, reply, ctx, span, record);
      await reply.landed;
      return 'done';
    } catch (err) {
      const failure = err instanceof ApiError ? err : err instanceof Cancelled ? null : internalError();
      if (!(err instanceof ApiError) && !(err instanceof Cancelled)) console.error(`parley: batch ${batch.id} line ${claimed.line}:`, err);
      status = failure?.status ?? 503;
      errorType = failure?.code ?? 'cancelled';
      const later = failure && NOT_NOW.has(failure.code ?? '') && !(failure instanceof RequestTooLarge);
      if (!failure || later || (await this.heldInFlight(failure, batch))) return 'not now';
      return failure;
    } finally {
      this.recordLine(span, record, status, errorType, (performance.now() - started) / 1000);
    }
  }

  /**
   * Refused for credit, or the key's budget, that requests of the account's own still in flight hold (its other
   * lines, here or on other replicas): the line waits for what they do not spend to come back.
   */
  private async heldInFlight(failure: ApiError, batch: ActiveBatch): Promise<boolean> {
    const { redis } = this.ctx;
    if (failure.code === 'insufficient_balance') {
      const balance = await balanceSummary(redis, batch.account);
      return balance.held > 0 && balance.total > 0;
    }
    if (failure.code === 'insufficient_quota') return Number((await redis.hget(redisKeys.keyBudget(batch.account, batch.keyId), 'held')) ?? 0) > 0;
    return false;
  }

  private recordLine(span: Span, record: RequestRecord, status: number, errorType: string | undefined, seconds: number): void {
    span.setAttribute('http.response.status_code', status);
    span.end();
    if (!record.api || !record.settings) return;
    this.ctx.telemetry.recordGeneration(record, seconds, errorType, record.settings.metricsTopAccounts);
    if (record.settings.requestLog) writeRequestLog(record, status, errorType, seconds);
  }

  private async renew(): Promise<void> {
    const byBatch = new Map<string, RunningLine[]>();
    for (const line of this.running) {
      const member = activeMember(line.account, line.batch);
      const lines = byBatch.get(member);
      if (lines) lines.push(line);
      else byBatch.set(member, [line]);
    }
    for (const lines of byBatch.values()) {
      await renewLeases(this.ctx.redis, lines[0].account, lines[0].batch, this.settings().leaseMs, lines.map((l) => l.member)).catch(() => {});
    }
  }

  /**
   * Stops claiming, lets the lines running here finish for up to `graceMs`, then ends the rest: each goes back
   * to its queue, unpaid, for another replica.
   */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    clearInterval(this.poll);
    const deadline = Date.now() + graceMs;
    while (this.running.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    for (const line of this.running) line.cancellation.cancel('shutdown');
    while (this.running.size > 0 && Date.now() < deadline + 2_000) await new Promise((r) => setTimeout(r, 50));
    clearInterval(this.renewal);
  }
}
