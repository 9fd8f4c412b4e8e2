// Hostile input, generated: malformed, oversized, deeply nested and
// wrong-typed bodies, unicode edge cases, odd headers. Never a 5xx, never a
// crash, never a charge or an upstream call for a refused request; a normal
// request succeeds afterwards.
import { request } from 'node:http';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { completionBody, replyJson, type FakeUpstream, type Script } from '../support/fake-upstream.js';
import { asAdmin, type GatewayOnUpstreams, modelEntry, startGatewayOn, type TestGateway, withGatewayOn } from '../support/gateway.js';

let running: GatewayOnUpstreams;
let upstream: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  running = await startGatewayOn([(_req, res) => replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }))], ([url]) => ({
    gateway: { maxBodyBytes: 64 * 1024 },
    models: [modelEntry('m', [{ kind: 'vllm', url }])],
  }));
  ({ gw, upstreams: [upstream] } = running);
});
afterAll(() => running.close());

/** Sends raw bytes with raw headers, as no well-behaved client would. */
function rawPost(body: Buffer | string, headers: Record<string, string>, base = gw.url): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const url = new URL(`${base}/v1/chat/completions`);
    const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const role = fc.oneof(fc.constantFrom('system', 'developer', 'user', 'assistant', 'tool', 'root', ''), fc.string());
const unicode = fc.oneof(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'binary' }), fc.constantFrom('\u0000', '\ud800', '\uffff', '𝕏'.repeat(50), 'é\u0301', '\u202e'));
const message = fc.record({ role, content: fc.oneof(unicode, fc.array(fc.record({ type: fc.constantFrom('text', 'image_url'), text: unicode }), { maxLength: 3 }), fc.anything()) }, { requiredKeys: [] });
const nested = fc.nat({ max: 5000 }).map((depth) => '['.repeat(depth) + ']'.repeat(depth));
const chatBody = fc.record(
  {
    model: fc.oneof(fc.constant('m'), fc.string(), fc.anything()),
    messages: fc.oneof(fc.array(message, { maxLength: 4 }), fc.anything()),
    n: fc.oneof(fc.integer({ min: -10, max: 10 }), fc.anything()),
    temperature: fc.oneof(fc.double(), fc.anything()),
    top_p: fc.double(),
    max_tokens: fc.oneof(fc.integer(), fc.double(), fc.string()),
    stop: fc.oneof(fc.array(unicode, { maxLength: 6 }), unicode, fc.anything()),
    logit_bias: fc.dictionary(fc.string(), fc.oneof(fc.double(), fc.anything())),
    stream: fc.oneof(fc.boolean(), fc.anything()),
    stream_options: fc.anything(),
    some_unknown_field: fc.anything(),
  },
  { requiredKeys: [] },
);

describe('hostile input', () => {
  it('bodies of every shape: never a 5xx, and a refused one costs nothing and calls no upstream', async () => {
    const start = (await readBalance(gw.redis.client, gw.account))!;
    let charged = 0;
    await fc.assert(
      fc.asyncProperty(fc.oneof(chatBody.map((b) => JSON.stringify(b)), fc.json(), nested, unicode, fc.uint8Array({ maxLength: 512 }).map((a) => Buffer.from(a))), async (body) => {
        const calls = upstream.received.length;
        const before = (await readBalance(gw.redis.client, gw.account))!;
        const res = await rawPost(body, { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}` });
        expect(res.status, res.body).toBeLessThan(500);
        if (res.status !== 200) {
          expect(JSON.parse(res.body).error.type).toBeTypeOf('string');
          expect(upstream.received.length).toBe(calls);
          expect((await readBalance(gw.redis.client, gw.account))!.granted).toBe(before.granted);
        } else charged++;
      }),
      { numRuns: 250 },
    );
    expect(charged).toBeLessThan(250);
    expect((await readBalance(gw.redis.client, gw.account))!.held).toBe(0);
    expect(start.granted).toBeGreaterThanOrEqual((await readBalance(gw.redis.client, gw.account))!.granted);
  });

  it('Unicode edge cases in every string field of a valid request: a 200 or a 4xx, never a 5xx, and never an open circuit', async () => {
    const edge = fc.oneof(
      unicode,
      fc.constantFrom('\ud800', '\udfff', 'a\ud83d', '\ude00b', '\ud83d\ude00', '\ufeff', '\u0000\u0001', '\u200b\u200d', 'ﬃ', '\u{10ffff}'),
      fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 8 }).map((units) => String.fromCharCode(...units)),
    );
    const validRequest = fc.record({
      system: edge, user: edge, name: edge, args: edge, stop: edge, toolName: edge, description: edge, schemaKey: edge, seedText: edge,
    }).map((t) => ({
      model: 'm',
      messages: [
        { role: 'system', content: t.system },
        { role: 'user', content: [{ type: 'text', text: t.user }], name: t.name },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: t.toolName, arguments: t.args } }] },
        { role: 'tool', content: t.seedText, tool_call_id: 'c1' },
      ],
      stop: [t.stop],
      tools: [{ type: 'function', function: { name: t.toolName, description: t.description, parameters: { type: 'object', properties: { [t.schemaKey]: { type: 'string' } } } } }],
      response_format: { type: 'json_schema', json_schema: { name: 'out', schema: { type: 'object', description: t.description } } },
      max_tokens: 4,
    }));
    const wellFormed = (v: unknown): boolean =>
      typeof v === 'string' ? v.isWellFormed() : typeof v === 'object' && v !== null ? Object.entries(v).every(([k, inner]) => k.isWellFormed() && wellFormed(inner)) : true;
    // As llama.cpp's server does: a 500 for text its JSON library cannot take.
    const strict: Script = (req, res) => {
      if (!wellFormed(req.body)) return replyJson(res, { error: { message: 'Internal Server Error' } }, 500);
      replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }));
    };
    const health = { failureThreshold: 1, minCallers: 1, probe: { intervalMs: 0 } };
    await withGatewayOn([strict], ([url]) => ({ gateway: { health }, models: [modelEntry('m', [{ kind: 'vllm', url }], { supports: { tools: true, jsonOutput: true } })] }), async (strictGw) => {
      await fc.assert(
        fc.asyncProperty(validRequest, async (body) => {
          const res = await rawPost(JSON.stringify(body), { 'content-type': 'application/json', authorization: `Bearer ${strictGw.apiKey}` }, strictGw.url);
          expect(res.status, res.body).toBeLessThan(500);
          if (res.status !== 200) expect(JSON.parse(res.body).error.type).toBe('invalid_request_error');
        }),
        { numRuns: 200 },
      );
      const view = await (await fetch(`${strictGw.url}/admin/endpoints`, { headers: asAdmin })).json();
      expect(view.data[0].endpoints[0].circuit).toBe('closed');
    });
  });

  it('headers of every kind: never a 5xx', async () => {
    const headerValue = fc.string({ maxLength: 300 }).filter((s) => /^[\t\x20-\x7e]*$/.test(s));
    await fc.assert(
      fc.asyncProperty(headerValue, headerValue, headerValue, async (authorization, contentType, requestId) => {
        const res = await rawPost(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }), {
          authorization, 'content-type': contentType, 'x-request-id': requestId,
        });
        expect(res.status, res.body).toBeLessThan(500);
      }),
      { numRuns: 150 },
    );
  });

  it('an oversized body is a 413, and the gateway serves normally afterwards', async () => {
    const res = await rawPost(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(200_000) }] }), { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}` });
    expect(res.status).toBe(413);
    const reply = await gw.client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'still here?' }] });
    expect(reply.choices[0].message.content).toBe('ok');
  });
});
