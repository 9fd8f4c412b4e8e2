// Nothing one caller sends may hold the main thread long enough to stall the
// others: prompts are counted by the model's tokenizer on threads of their
// own, a prompt is counted exactly only up to EXACT_COUNT_MAX_BYTES, one whose
// fewest possible tokens pass the window is refused without counting, and
// count_tokens is one of the key's requests, within its rate window. A large
// body dense with objects and arrays is refused before it is parsed: 4 MiB of
// `{},` held the main thread 300 ms and more to parse, for a request free to
// its sender.
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXACT_COUNT_MAX_BYTES } from '../../src/gateway/chat-completions.js';
import { ensureDefaultModel } from '../../src/engine/model-maker.js';
import { chatCalls, completionBody, replyJson, type FakeUpstream } from '../support/fake-upstream.js';
import { longestStall } from '../support/event-loop.js';
import { makeAccount, modelEntry, startGatewayOn, type GatewayOnUpstreams, type TestGateway } from '../support/gateway.js';

let running: GatewayOnUpstreams;
let gw: TestGateway;
let upstream: FakeUpstream;

beforeAll(async () => {
  const tokenizer = ensureDefaultModel(join(process.cwd(), '.parley-test', 'tokenizer.gguf'));
  running = await startGatewayOn([(_req, res) => replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }))], ([url]) => ({
    gateway: { maxBodyBytes: 8 * 1024 * 1024 },
    models: [
      // A window as large as today's largest, so that a 4 MB prompt is not refused by its size alone.
      modelEntry('big', [{ kind: 'vllm', url }], { contextWindow: 1_048_576, tokenizer: { gguf: tokenizer } }),
      modelEntry('small', [{ kind: 'vllm', url }], { contextWindow: 4096, tokenizer: { gguf: tokenizer } }),
    ],
  }));
  ({ gw, upstreams: [upstream] } = running);
});
afterAll(() => running.close());

const post = (path: string, key: string, body: unknown) =>
  fetch(`${gw.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify(body) });

/** Polls /healthz every 50 ms until `work` is done: the slowest answer, in ms. */
async function slowestHealthz(work: Promise<unknown>): Promise<number> {
  let done = false;
  void work.finally(() => (done = true));
  let slowest = 0;
  while (!done) {
    const started = performance.now();
    expect((await fetch(`${gw.url}/healthz`)).status).toBe(200);
    slowest = Math.max(slowest, performance.now() - started);
    await new Promise((r) => setTimeout(r, 50));
  }
  return slowest;
}

describe('the main thread under large prompts', () => {
  it("keeps /healthz under 250 ms while a zero-credit account sends four 4 MB prompts (chat and count_tokens)", async () => {
    const broke = await makeAccount(gw.redis, 0);
    const text = 'lorem ipsum dolor sit amet, '.repeat(150_000);
    expect(text.length).toBeGreaterThan(4_000_000);
    const messages = [{ role: 'user', content: text }];
    const calls = chatCalls(upstream);
    const send = () =>
      Promise.all([
        post('/v1/chat/completions', broke.key, { model: 'big', messages }),
        post('/v1/messages/count_tokens', broke.key, { model: 'big', messages }),
        post('/v1/chat/completions', broke.key, { model: 'big', messages }),
        post('/v1/messages/count_tokens', broke.key, { model: 'big', messages }),
      ]);
    // The client runs in this process too, and a test run shares two cores with other test files: a round slowed by
    // the machine is measured again, up to five rounds (counting every prompt, one round took 3,982 ms; alone, a
    // round takes 180 to 320 ms, the first the longest; beside the whole suite, three rounds in a row once took
    // 567, 271 and 346 ms, 2026-11-29).
    let slowest = Infinity;
    let answers = send();
    for (let round = 1; round <= 5 && slowest >= 250; round++) {
      if (round > 1) answers = send();
      slowest = await slowestHealthz(answers);
      console.log(`parley test: slowest /healthz beside four 4 MB prompts, round ${round}: ${slowest.toFixed(1)} ms`);
    }
    expect(slowest).toBeLessThan(250);
    const [chat1, count1, chat2, count2] = await answers;
    // Refused before any upstream call: the prompt's bound passes the key's tokens a minute, or its credit.
    for (const chat of [chat1, chat2]) expect([402, 429]).toContain(chat.status);
    expect([count1.status, count2.status]).toEqual([200, 200]);
    // Past the bound, count_tokens estimates (about 3 bytes a token), as for a model without a tokenizer.
    expect((await count1.json()).input_tokens).toBeGreaterThan(1_000_000);
    expect(chatCalls(upstream)).toBe(calls);
  });

  it('counts a prompt exactly up to the bound', async () => {
    const { key } = await makeAccount(gw.redis, 1);
    const content = 'a'.repeat(EXACT_COUNT_MAX_BYTES - 100);
    const exact = await (await post('/v1/messages/count_tokens', key, { model: 'big', messages: [{ role: 'user', content }] })).json();
    const estimate = await (await post('/v1/messages/count_tokens', key, { model: 'big', messages: [{ role: 'user', content: `${content}${'a'.repeat(200)}` }] })).json();
    // parley-tiny's vocabulary has no merge of "aa": counted, each "a" is a token; estimated, about 3 bytes are.
    expect(exact.input_tokens).toBeGreaterThan(content.length);
    expect(estimate.input_tokens).toBeLessThan(content.length / 2);
  });

  describe('counting on a thread of its own', () => {
    const content = (i: number) => `${i}`.padEnd(EXACT_COUNT_MAX_BYTES - 100, 'a');
    const counter = async () => {
      const { key } = await makeAccount(gw.redis, 1);
      return (text: string) => post('/v1/messages/count_tokens', key, { model: 'big', messages: [{ role: 'user', content: text }] }).then((r) => r.json());
    };

    it('three prompts counted at once never hold the event loop for one count', async () => {
      const count = await counter();
      // One count alone: its time is mostly the tokenizer's (each "a" a token of parley-tiny's).
      await count(content(0));
      let started = performance.now();
      expect((await count(content(1))).input_tokens).toBeGreaterThan(EXACT_COUNT_MAX_BYTES - 100);
      const oneCount = performance.now() - started;
      // On the main thread, counts sent together ran back to back, each holding the loop for its whole length.
      // A round slowed by the machine (two cores shared with other test files) is measured again, up to three.
      let longestStall = Infinity;
      for (let round = 1; round <= 3 && longestStall >= oneCount / 2; round++) {
        const loop = monitorEventLoopDelay({ resolution: 5 });
        loop.enable();
        started = performance.now();
        const answers = await Promise.all([0, 1, 2].map((i) => count(content(round * 10 + i))));
        loop.disable();
        for (const a of answers) expect(a.input_tokens).toBeGreaterThan(EXACT_COUNT_MAX_BYTES - 100);
        longestStall = loop.max / 1e6;
        console.log(`parley test: one count ${oneCount.toFixed(1)} ms; three at once ${(performance.now() - started).toFixed(1)} ms, the loop's longest stall ${longestStall.toFixed(1)} ms (round ${round})`);
      }
      expect(longestStall).toBeLessThan(oneCount / 2);
    });

    it('past 512 KB of prompts waiting to be counted, bounds the next by its bytes instead of queueing it', async () => {
      const count = await counter();
      const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => count(content(100 + i))));
      const tokens = answers.map((a) => a.input_tokens as number);
      // Three fit in the queue at once (each 128 KB and a count's own weight); one that finds it full is estimated, at
      // about 3 bytes a token.
      expect(tokens.filter((t) => t > EXACT_COUNT_MAX_BYTES - 100).length).toBeGreaterThanOrEqual(3);
      expect(tokens.filter((t) => t < EXACT_COUNT_MAX_BYTES / 2).length).toBeGreaterThanOrEqual(1);
    });
  });

  it("refuses at once a prompt whose fewest possible tokens pass the window, without counting it", async () => {
    const { key } = await makeAccount(gw.redis, 1);
    const messages = [{ role: 'user', content: 'x'.repeat(4_000_000) }];
    const started = performance.now();
    const res = await post('/v1/chat/completions', key, { model: 'small', messages });
    expect(performance.now() - started).toBeLessThan(1000);
    expect(res.status).toBe(400);
    const { error } = await res.json();
    expect(error.code, error.message).toBe('context_length_exceeded');
    expect(error.message).toMatch(/at least \d+ tokens > 4096/);
  });

  it('refuses a large body dense with objects before parsing it, and serves a conversation of its kind', async () => {
    const { key } = await makeAccount(gw.redis, 100);
    const send = (path: string, body: string) => fetch(`${gw.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body });
    // 3.9 MB of `{},`: 1.3 million objects, which JSON.parse took 300 ms and more to make.
    const dense = `{"model":"big","max_tokens":4,"messages":[${Array(1_300_000).fill('{}').join(',')}]}`;
    const stall = await longestStall('3.9 MB of {}, sent and refused', async () => {
      const res = await send('/v1/chat/completions', dense);
      expect(res.status).toBe(400);
      expect((await res.json()).error).toMatchObject({ type: 'invalid_request_error', code: 'body_too_dense' });
    }, 100);
    // Parsed, it held the loop 300 ms and more; looked at first, what is left is the body's reading.
    expect(stall).toBeLessThan(100);
    const anthropic = await send('/v1/messages', dense);
    expect(anthropic.status).toBe(400);
    expect(await anthropic.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('one object or array per 16 bytes') } });
    // A conversation of 1.5 MB, its turns in content blocks and code (braces and brackets) in its text, is looked at and served.
    const messages = Array.from({ length: 2000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: [{ type: 'text', text: 'function f(x) { return [x, {y: "\\"}]; } '.repeat(20) }] }));
    const served = await send('/v1/chat/completions', JSON.stringify({ model: 'big', max_tokens: 4, messages }));
    expect(served.status).toBe(200);
    expect((await served.json()).choices[0].message.content).toBe('ok');
  });

  it("counts count_tokens against the key's request rate", async () => {
    const { key } = await makeAccount(gw.redis, 1);
    gw.writeConfig({ rateLimits: { requestsPerMinute: 2 }, gateway: { maxBodyBytes: 8 * 1024 * 1024 }, models: [modelEntry('small', [{ kind: 'vllm', url: upstream.url }], { contextWindow: 4096 })] });
    await expect.poll(() => gw.context.routing().rateLimits.requestsPerMinute, { timeout: 5000 }).toBe(2);
    const body = { model: 'small', messages: [{ role: 'user', content: 'hello' }] };
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await post('/v1/messages/count_tokens', key, body)).status);
    expect(statuses).toEqual([200, 200, 429]);
    // Its window is the one generation draws on: the key has no request left.
    expect((await post('/v1/messages', key, { ...body, max_tokens: 4 })).status).toBe(429);
  });
});
