// A request's child spans (its credit hold, upstream attempts, settlement):
// under a request span that records nothing, one shared span that records
// nothing, not a span and a context made for each.
import { describe, expect, it } from 'vitest';
import { Router } from '../../src/routing/router.js';
import { Telemetry } from '../../src/telemetry/telemetry.js';

describe('child spans', () => {
  it('under a request span that records nothing are one span that records nothing, not one made per child', async () => {
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    const telemetry = new Telemetry(new Router());
    try {
      const request = telemetry.tracer.startSpan('POST /v1/chat/completions');
      expect(request.isRecording()).toBe(false);
      const hold = telemetry.child(request, 'credit hold', { 'parley.prompt_tokens': 12 });
      const settle = telemetry.child(request, 'settle', { 'parley.outcome': 'complete' });
      expect(hold.isRecording()).toBe(false);
      expect(settle).toBe(hold);
    } finally {
      await telemetry.shutdown();
    }
  });
});
