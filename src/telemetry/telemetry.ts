// OpenTelemetry for the gateway: a trace per request (the request, each
// upstream attempt, the settlement) exported over OTLP when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, and metrics both scrapeable as
// Prometheus text at /metrics and, with that variable, pushed over OTLP.
// Spans and metrics carry model ids, endpoints, statuses and token counts,
// never an API key or any prompt or reply text.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, trace, type Span, type Tracer } from '@opentelemetry/api';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, PeriodicExportingMetricReader, type MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Usage } from '../protocol/chat-response.js';
import type { Router } from '../routing/router.js';
import { HistogramTally, histogramProducer, Tally } from './tallies.js';

const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export class Telemetry {
  readonly tracer: Tracer;
  private readonly prometheus: PrometheusExporter;
  private readonly meterProvider: MeterProvider;
  private readonly tracerProvider: BasicTracerProvider | undefined;
  private readonly requests = new Tally();
  private readonly duration = new HistogramTally('parley_request_duration_seconds', 'Time to answer a request, to its last byte', 's', SECONDS_BUCKETS);
  private readonly firstToken = new HistogramTally('parley_time_to_first_token_seconds', 'Time from a streamed request to its first content', 's', SECONDS_BUCKETS);
  private readonly tokens = new Tally();
  /** Read when metrics are collected, like the tallies: an up-down counter would hash its attributes twice per request. */
  private holdsOpen = 0;

  constructor(router: Router) {
    const resource = resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME ?? 'parley' });
    const otlp = Boolean(process.env.OTEL_EXPORTER_OTLP_ENDPOINT);
    const metricProducers = [histogramProducer(resource, 'parley', [this.duration, this.firstToken])];
    this.prometheus = new PrometheusExporter({ preventServerStart: true, metricProducers });
    const readers: MetricReader[] = [this.prometheus];
    if (otlp) readers.push(new PeriodicExportingMetricReader({ exporter: new OTLPMetricExporter(), exportIntervalMillis: 15_000, metricProducers }));
    this.meterProvider = new MeterProvider({ resource, readers });
    this.tracerProvider = otlp ? new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter(), { scheduledDelayMillis: 500 })] }) : undefined;
    this.tracer = (this.tracerProvider ?? trace.getTracerProvider()).getTracer('parley');

    const meter = this.meterProvider.getMeter('parley');
    meter.createObservableCounter('parley_requests', { description: 'Requests answered, by route, status and error code' }).addCallback((r) => this.requests.observe(r));
    meter.createObservableCounter('parley_tokens', { description: 'Tokens metered, by model and kind (prompt, cached, completion)' }).addCallback((r) => this.tokens.observe(r));
    meter.createObservableUpDownCounter('parley_holds_open', { description: 'Credit holds this replica has open' }).addCallback((r) => r.observe(this.holdsOpen));
    meter.createObservableGauge('parley_upstream_healthy', { description: '1 when the endpoint\'s circuit is closed' }).addCallback((result) => {
      for (const model of router.snapshot()) {
        for (const e of model.endpoints) result.observe(e.circuit === 'closed' ? 1 : 0, { model: model.model, endpoint: e.url });
      }
    });
    meter.createObservableGauge('parley_upstream_in_flight', { description: "This replica's requests holding one of the endpoint's slots" }).addCallback((result) => {
      for (const model of router.snapshot()) for (const e of model.endpoints) result.observe(e.inFlight, { model: model.model, endpoint: e.url });
    });
    meter.createObservableGauge('parley_upstream_queued', { description: "This replica's requests waiting for one of the endpoint's slots, by service tier" }).addCallback((result) => {
      for (const model of router.snapshot()) {
        for (const e of model.endpoints) for (const [tier, queued] of Object.entries(e.queuedByTier)) result.observe(queued, { model: model.model, endpoint: e.url, tier });
      }
    });
  }

  recordRequest(route: string, status: number, code: string | null, seconds: number): void {
    this.requests.add(`${route}\t${status}\t${code ?? ''}`, 1, () => ({ route, status: String(status), code: code ?? '' }));
    this.duration.record(`${route}\t${status}`, seconds, () => ({ route, status: String(status) }));
  }

  recordFirstToken(model: string, seconds: number): void {
    this.firstToken.record(model, seconds, () => ({ model }));
  }

  recordUsage(model: string, usage: Usage): void {
    for (const [kind, value] of [['prompt', usage.prompt_tokens], ['cached', usage.cached_tokens], ['completion', usage.completion_tokens]] as const) {
      this.tokens.add(`${model}\t${kind}`, value, () => ({ model, kind }));
    }
  }

  holdOpened(): void {
    this.holdsOpen++;
  }

  holdClosed(): void {
    this.holdsOpen--;
  }

  /** A child span of `parent` (the request's span). */
  child(parent: Span, name: string, attributes: Record<string, string | number>): Span {
    // Under a parent that records nothing (no trace exporter) the child would record nothing either: the
    // tracer would still build a context and check the parent's ids, some 1% of a short request's time.
    if (!parent.isRecording()) return trace.wrapSpanContext(parent.spanContext());
    return this.tracer.startSpan(name, { attributes }, trace.setSpan(context.active(), parent));
  }

  serveMetrics(req: IncomingMessage, res: ServerResponse): void {
    this.prometheus.getMetricsRequestHandler(req, res);
  }

  async shutdown(): Promise<void> {
    await Promise.allSettled([this.meterProvider.shutdown(), this.tracerProvider?.shutdown()]);
  }
}
