import { resourceFromAttributes } from '@opentelemetry/resources';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader, type HistogramMetricData } from '@opentelemetry/sdk-metrics';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { describe, expect, it } from 'vitest';
import { HistogramTally, histogramProducer } from '../../src/telemetry/tallies.js';

const BOUNDARIES = [0.01, 0.1, 1];
// On a boundary, between two, below the first and above the last; two series.
const RECORDS: [string, number][] = [['a', 0.01], ['a', 0.05], ['a', 0.1], ['a', 0.0001], ['a', 7], ['b', 1], ['b', 0.5], ['a', 0.1]];

describe('a histogram kept by Parley', () => {
  it("reports what the SDK's own histogram reports for the same values", async () => {
    const resource = resourceFromAttributes({ 'service.name': 'test' });
    const ours = new HistogramTally('ours_seconds', 'ours', 's', BOUNDARIES);
    const reader = new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), metricProducers: [histogramProducer(resource, 'parley', [ours])] });
    const provider = new MeterProvider({ resource, readers: [reader] });
    const theirs = provider.getMeter('parley').createHistogram('theirs_seconds', { unit: 's', advice: { explicitBucketBoundaries: BOUNDARIES } });
    for (const [series, value] of RECORDS) {
      ours.record(series, value, () => ({ series }));
      theirs.record(value, { series });
    }
    const { resourceMetrics } = await reader.collect();
    const metric = (name: string) => resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name) as HistogramMetricData;
    const points = (name: string) => metric(name).dataPoints.map((p) => ({ attributes: p.attributes, value: p.value }));
    expect(points('ours_seconds')).toEqual(points('theirs_seconds'));
    expect(points('ours_seconds').find((p) => p.attributes.series === 'a')!.value.buckets.counts).toEqual([2, 3, 0, 1]);
    expect(metric('ours_seconds').aggregationTemporality).toBe(metric('theirs_seconds').aggregationTemporality);
    await provider.shutdown();
  });

  it('goes out as Prometheus text with its buckets, sum and count', async () => {
    const resource = resourceFromAttributes({ 'service.name': 'test' });
    const ours = new HistogramTally('ours_seconds', 'How long', 's', BOUNDARIES);
    const prometheus = new PrometheusExporter({ preventServerStart: true, metricProducers: [histogramProducer(resource, 'parley', [ours])] });
    const provider = new MeterProvider({ resource, readers: [prometheus] });
    for (const [series, value] of RECORDS) ours.record(series, value, () => ({ series }));
    const text = await new Promise<string>((resolve) => {
      const res = { statusCode: 0, setHeader() {}, end: (body: string) => resolve(body) };
      prometheus.getMetricsRequestHandler({} as never, res as never);
    });
    expect(text).toContain('# HELP ours_seconds How long');
    expect(text).toContain('ours_seconds_bucket{series="a",otel_scope_name="parley",le="0.1"} 5');
    expect(text).toContain('ours_seconds_bucket{series="a",otel_scope_name="parley",le="+Inf"} 6');
    expect(text).toContain('ours_seconds_count{series="b",otel_scope_name="parley"} 2');
    expect(text).toContain('ours_seconds_sum{series="b",otel_scope_name="parley"} 1.5');
    await provider.shutdown();
  });
});
