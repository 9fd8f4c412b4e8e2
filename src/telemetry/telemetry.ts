// OpenTelemetry for the gateway: a trace per request (the request, each
// upstream attempt, the settlement) exported over OTLP when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, and metrics both scrapeable as
// Prometheus text at /metrics and, with that variable, pushed over OTLP.
// Generation figures follow OpenTelemetry's GenAI conventions (gen_ai.*:
// the server's request duration, time to first token and per output token,
// token usage, and each upstream call's duration as its client), so the
// dashboards operators keep for Envoy AI Gateway and vLLM read them; what
// has no convention keeps a parley_ name. Spans and metrics carry model
// ids, endpoints, statuses and token counts, never an API key or any prompt
// or reply text.
import type { EngineLoad } from '../upstream/engine-load.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, trace, type ObservableGauge, type Span, type Tracer } from '@opentelemetry/api';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, PeriodicExportingMetricReader, type MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { BatchLineTotals } from '../batches/batch-progress.js';
import type { Router } from '../routing/router.js';
import { GEN_AI_OPERATIONS, type RequestRecord } from './request-record.js';
import { requestLogLinesDropped } from './request-log.js';
import { HistogramTally, histogramProducer, Tally, type Attributes } from './tallies.js';

const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
// The buckets the GenAI conventions give each of their histograms.
const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
const FIRST_TOKEN_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
const PER_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];

/** The GenAI attributes of a generation: what it asked for, what served it, where, and how it failed. */
function genAiAttributes(r: RequestRecord, errorType?: string): Attributes {
  const attributes: Attributes = { 'gen_ai.operation.name': GEN_AI_OPERATIONS[r.api!], 'gen_ai.request.model': r.modelLabel ?? '(unknown)', 'gen_ai.provider.name': r.provider ?? 'parley' };
  if (r.servedModel) attributes['gen_ai.response.model'] = r.servedModel;
  if (r.endpoint) attributes['server.address'] = r.endpoint;
  if (errorType) attributes['error.type'] = errorType;
  return attributes;
}

/**
 * The series genAiAttributes names, as a key made without making them: they
 * are made only for a series' first value. Made from the objects, a
 * streamed generation took 9.0 µs to record, 1.3 µs this way
 * (`node bench/metrics-record.mjs 3677d79`, 2026-11-27).
 */
const generationKey = (r: RequestRecord, errorType = '') =>
  `${GEN_AI_OPERATIONS[r.api!]}\t${r.modelLabel ?? '(unknown)'}\t${r.provider ?? 'parley'}\t${r.servedModel ?? ''}\t${r.endpoint ?? ''}\t${errorType}`;

/** What the rest of the gateway tells its gauges. */
interface GatewayGauges {
  settlementsJournaled(): number;
  redisReady(): boolean;
  /** Entries in the API-key caches (accounts/key-authenticator.ts). */
  keyCaches?(): { keys: number; keyHmacs: number; keyIdHashes: number };
  /** The fleet's batch lines by state, read from Redis when asked (a scrape); rejected while it cannot be read. */
  batchTotals?(): Promise<BatchLineTotals>;
  /** Batch lines this replica is running now. */
  batchLinesRunningHere?(): number;
}

export class Telemetry {
  readonly tracer: Tracer;
  private readonly prometheus: PrometheusExporter;
  private readonly meterProvider: MeterProvider;
  private readonly tracerProvider: BasicTracerProvider | undefined;
  private readonly requests = new Tally();
  private readonly duration = new HistogramTally('parley_request_duration_seconds', 'Time to answer a request, to its last byte', 's', SECONDS_BUCKETS);
  private readonly serverDuration = new HistogramTally('gen_ai.server.request.duration', 'Generative AI server request duration, to the last byte of the reply', 's', DURATION_BUCKETS);
  private readonly firstToken = new HistogramTally('gen_ai.server.time_to_first_token', 'Time to generate the first token, for successful streamed responses', 's', FIRST_TOKEN_BUCKETS);
  private readonly perOutputToken = new HistogramTally('gen_ai.server.time_per_output_token', 'Time per output token generated after the first, for successful streamed responses', 's', PER_TOKEN_BUCKETS);
  private readonly tokenUsage = new HistogramTally('gen_ai.client.token.usage', 'Tokens used per request: input, output, and the input read from the upstream cache (cached_input)', '{token}', TOKEN_BUCKETS);
  private readonly upstreamDuration = new HistogramTally('gen_ai.client.operation.duration', 'Each upstream call, as its client: to its first byte', 's', DURATION_BUCKETS);
  /** The credit holds this replica has open, each with when it opened; read when metrics are collected. */
  private readonly openHolds = new Set<{ openedAt: number }>();
  private readonly charged = new Tally();
  /** Tokens by account, for parley_account_tokens; kept only while an operator asks for it. */
  private readonly accountTokens = new Map<string, number>();
  private topAccounts = 0;
  /** What the gauges of the rest of the gateway read, once it is started. */
  private gateway: GatewayGauges | undefined;

  constructor(router: Router) {
    const resource = resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME ?? 'parley' });
    const otlp = Boolean(process.env.OTEL_EXPORTER_OTLP_ENDPOINT);
    const metricProducers = [histogramProducer(resource, 'parley', [this.duration, this.serverDuration, this.firstToken, this.perOutputToken, this.tokenUsage, this.upstreamDuration])];
    this.prometheus = new PrometheusExporter({ preventServerStart: true, metricProducers });
    const readers: MetricReader[] = [this.prometheus];
    if (otlp) readers.push(new PeriodicExportingMetricReader({ exporter: new OTLPMetricExporter(), exportIntervalMillis: 15_000, metricProducers }));
    this.meterProvider = new MeterProvider({ resource, readers });
    this.tracerProvider = otlp ? new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter(), { scheduledDelayMillis: 500 })] }) : undefined;
    this.tracer = (this.tracerProvider ?? trace.getTracerProvider()).getTracer('parley');

    const meter = this.meterProvider.getMeter('parley');
    meter.createObservableCounter('parley_requests', { description: 'Requests answered, by route, status and error code' }).addCallback((r) => this.requests.observe(r));
    meter.createObservableUpDownCounter('parley_holds_open', { description: 'Credit holds this replica has open' }).addCallback((r) => r.observe(this.openHolds.size));
    meter.createObservableGauge('parley_oldest_hold_seconds', { description: 'How long the oldest credit hold this replica has open has been open' }).addCallback((r) => {
      const now = performance.now();
      let oldest = 0;
      for (const h of this.openHolds) oldest = Math.max(oldest, (now - h.openedAt) / 1000);
      r.observe(oldest);
    });
    meter.createObservableCounter('parley_credit_charged_micros', { description: 'Credit charged for complete replies, in micro-units of the account currency, by model' }).addCallback((r) => this.charged.observe(r));
    meter.createObservableGauge('parley_account_tokens', { description: 'Tokens (prompt and completion) since this replica started, for the gateway.metricsTopAccounts accounts that used the most, and the rest as account="other"' }).addCallback((r) => {
      if (this.topAccounts === 0) return;
      const ranked = [...this.accountTokens].sort((a, b) => b[1] - a[1]);
      for (const [account, tokens] of ranked.slice(0, this.topAccounts)) r.observe(tokens, { account });
      r.observe(ranked.slice(this.topAccounts).reduce((sum, [, tokens]) => sum + tokens, 0), { account: 'other' });
    });
    meter.createObservableGauge('parley_settlements_journaled', { description: 'Settlements kept on disk while Redis was away, not landed yet' }).addCallback((r) => r.observe(this.gateway?.settlementsJournaled() ?? 0));
    const batchesActive = meter.createObservableGauge('parley_batches_active', { description: 'Batches with lines still to run, fleet-wide (every replica reports the same figure; read with max)' });
    const batchLines = meter.createObservableGauge('parley_batch_lines', { description: "The lines of the fleet's active batches, by state: queued, running, succeeded, errored (fleet-wide; read with max)" });
    meter.addBatchObservableCallback(async (r) => {
      const totals = await this.gateway?.batchTotals?.().catch(() => undefined);
      if (!totals) return;
      r.observe(batchesActive, totals.batches);
      for (const state of ['queued', 'running', 'succeeded', 'errored'] as const) r.observe(batchLines, totals[state], { state });
    }, [batchesActive, batchLines]);
    meter.createObservableGauge('parley_batch_lines_running_here', { description: 'Batch lines this replica is running now' }).addCallback((r) => r.observe(this.gateway?.batchLinesRunningHere?.() ?? 0));
    meter.createObservableCounter('parley_request_log_lines_dropped', { description: "Request log lines dropped because stdout's reader fell 16 MiB behind" }).addCallback((r) => r.observe(requestLogLinesDropped()));
    meter.createObservableGauge('parley_key_cache_entries', { description: 'Entries in this replica\'s API-key caches: keys looked up (known or not), key HMACs, key ids\' hashes. Made-up keys fill key_hmacs to its bound (10,000)' }).addCallback((r) => {
      const sizes = this.gateway?.keyCaches?.();
      if (!sizes) return;
      r.observe(sizes.keys, { cache: 'keys' });
      r.observe(sizes.keyHmacs, { cache: 'key_hmacs' });
      r.observe(sizes.keyIdHashes, { cache: 'key_id_hashes' });
    });
    meter.createObservableGauge('parley_redis_up', { description: "1 when this replica's Redis connection is ready" }).addCallback((r) => r.observe(this.gateway?.redisReady() ? 1 : 0));
    // The endpoints' gauges, observed from one snapshot of the router per collection.
    const healthy = meter.createObservableGauge('parley_upstream_healthy', { description: "1 when the endpoint's circuit is closed" });
    const inFlight = meter.createObservableGauge('parley_upstream_in_flight', { description: "This replica's requests holding one of the endpoint's slots" });
    const queued = meter.createObservableGauge('parley_upstream_queued', { description: "This replica's requests waiting for one of the endpoint's slots, by service tier" });
    const spills = meter.createObservableCounter('parley_affinity_spills', { description: "Requests prefix affinity sent away from where their key's prompt is cached, as that was busy, by model" });
    const reported = meter.createObservableGauge('parley_engine_load_reported', { description: "1 when routing goes by the engine's own recent report of its load; 0 when by Parley's counts alone (a hosted API, reading off, or the last read failed)" });
    const engineGauges: [ObservableGauge, (load: EngineLoad) => number | undefined][] = [
      [meter.createObservableGauge('parley_engine_requests_running', { description: 'Requests the engine last said it was running' }), (l) => l.running],
      [meter.createObservableGauge('parley_engine_requests_waiting', { description: 'Requests the engine last said were waiting in its own queue' }), (l) => l.waiting],
      [meter.createObservableGauge('parley_engine_kv_cache_usage', { description: 'The share of its KV cache the engine last said was in use (0 to 1)' }), (l) => l.kvCacheUse],
    ];
    meter.addBatchObservableCallback((result) => {
      for (const model of router.snapshot()) {
        if (model.policy === 'prefix-affinity') result.observe(spills, model.spills, { model: model.model });
        for (const e of model.endpoints) {
          const at = { model: model.model, endpoint: e.url };
          result.observe(healthy, e.circuit === 'closed' ? 1 : 0, at);
          result.observe(inFlight, e.inFlight, at);
          for (const [tier, count] of Object.entries(e.queuedByTier)) result.observe(queued, count, { ...at, tier });
          result.observe(reported, e.engine.source === 'engine' ? 1 : 0, at);
          for (const [gauge, value] of engineGauges) {
            const v = e.engine.load && value(e.engine.load);
            if (v !== undefined) result.observe(gauge, v, at);
          }
        }
      }
    }, [healthy, inFlight, queued, spills, reported, ...engineGauges.map(([gauge]) => gauge)]);
  }

  recordRequest(route: string, status: number, code: string | null, seconds: number): void {
    this.requests.add(`${route}\t${status}\t${code ?? ''}`, 1, () => ({ route, status: String(status), code: code ?? '' }));
    this.duration.record(`${route}\t${status}`, seconds, () => ({ route, status: String(status) }));
  }

  /**
   * A generation (a request through one of the APIs) ended: its duration, tokens and time per output token;
   * by account only for the `topAccounts` that used the most (0: none), so that tenants cannot multiply series.
   */
  recordGeneration(r: RequestRecord, seconds: number, errorType: string | undefined, topAccounts: number): void {
    this.topAccounts = topAccounts;
    if (topAccounts > 0 && r.account && r.promptTokens !== undefined) {
      this.accountTokens.set(r.account, (this.accountTokens.get(r.account) ?? 0) + r.promptTokens + (r.completionTokens ?? 0));
    }
    const key = generationKey(r, errorType);
    this.serverDuration.record(key, seconds, () => genAiAttributes(r, errorType));
    if (errorType || r.promptTokens === undefined) return;
    this.recordTokens(key, r, 'input', r.promptTokens);
    this.recordTokens(key, r, 'output', r.completionTokens ?? 0);
    this.recordTokens(key, r, 'cached_input', r.cachedTokens ?? 0);
    const after = (r.completionTokens ?? 0) - 1;
    if (r.streamed && r.firstByteMs !== undefined && after > 0) this.perOutputToken.record(key, (seconds - r.firstByteMs / 1000) / after, () => genAiAttributes(r));
  }

  /** A generation's tokens of one type; `key`: its series without the type (generationKey). */
  private recordTokens(key: string, r: RequestRecord, type: string, count: number): void {
    this.tokenUsage.record(`${key}\t${type}`, count, () => ({ ...genAiAttributes(r), 'gen_ai.token.type': type }));
  }

  recordFirstToken(r: RequestRecord, seconds: number): void {
    this.firstToken.record(generationKey(r), seconds, () => genAiAttributes(r));
  }

  /** One upstream call, from Parley as its client, to its first byte (or its failure). */
  recordUpstreamCall(r: RequestRecord, endpoint: { url: string; kind: string; upstreamModel: string }, seconds: number, errorType?: string): void {
    this.upstreamDuration.record(`${GEN_AI_OPERATIONS[r.api!]}\t${endpoint.upstreamModel}\t${endpoint.kind}\t${endpoint.url}\t${errorType ?? ''}`, seconds, () => {
      const attributes: Attributes = { 'gen_ai.operation.name': GEN_AI_OPERATIONS[r.api!], 'gen_ai.request.model': endpoint.upstreamModel, 'gen_ai.provider.name': endpoint.kind, 'server.address': endpoint.url };
      if (errorType) attributes['error.type'] = errorType;
      return attributes;
    });
  }

  /** Reads the settlement journal and the Redis connection for their gauges. */
  watch(gateway: GatewayGauges): void {
    this.gateway = gateway;
  }

  /** A credit hold opened; close it with holdClosed. */
  holdOpened(): { openedAt: number } {
    const hold = { openedAt: performance.now() };
    this.openHolds.add(hold);
    return hold;
  }

  holdClosed(hold: { openedAt: number }): void {
    this.openHolds.delete(hold);
  }

  recordCharge(model: string, micros: number): void {
    this.charged.add(model, micros, () => ({ model }));
  }

  /**
   * A child span of `parent` (the request's span). A request not traced (no exporter, or sampled out) gets its own
   * span back, which records nothing either: a child of it would cost a context and a check of its ids for nothing
   * (1.8 µs a whole request in `node bench/cpu-profile.mjs 0327bf4~ whole 32 8 4`, 2026-11-29).
   */
  child(parent: Span, name: string, attributes: Record<string, string | number>): Span {
    if (!parent.isRecording()) return parent;
    return this.tracer.startSpan(name, { attributes }, trace.setSpan(context.active(), parent));
  }

  serveMetrics(req: IncomingMessage, res: ServerResponse): void {
    this.prometheus.getMetricsRequestHandler(req, res);
  }

  async shutdown(): Promise<void> {
    await Promise.allSettled([this.meterProvider.shutdown(), this.tracerProvider?.shutdown()]);
  }
}
