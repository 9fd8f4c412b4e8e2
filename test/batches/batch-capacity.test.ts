// A batch runs in the capacity the interactive teams leave: alone it keeps
// an endpoint's flex share of slots busy; beside it, an interactive stream's
// time to first token stays near what it is with the endpoint idle. And the
// key that made a batch limits every line: its models, its budget, its
// account's rate, and half its account's bound of requests in flight.
import OpenAI, { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { setAccountLimits } from '../../src/accounts/accounts.js';
import { createApiKey, setKeyLimits } from '../../src/accounts/api-keys.js';
import { readBatch } from '../../src/batches/batch-store.js';
import { completionBody, replyJson, sleep, until, writeEvents, chunk, type Script } from '../support/fake-upstream.js';
import { asAdmin, makeAccount, modelEntry, postChat, TEST_KEY_SECRET, withGatewayOn, type TestGateway } from '../support/gateway.js';

/** An engine of 4 slots: a batch line takes 300 ms; an interactive stream's first token comes after 20 ms. Counts requests at once. */
function engine() {
  const seen = { now: 0, most: 0 };
  const script: Script = async (req, res) => {
    if (!req.path.endsWith('/chat/completions')) return replyJson(res, { data: [] });
    seen.most = Math.max(seen.most, ++seen.now);
    res.on('close', () => seen.now--);
    if (req.body.stream) {
      await sleep(20);
      return writeEvents(res, [chunk({ role: 'assistant', content: 'hi' }), chunk({}, 'stop'), { ...chunk({}), choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } }]);
    }
    await sleep(300);
    replyJson(res, completionBody('done', { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 }));
  };
  return { seen, script };
}

const lines = (n: number, model = 'm', content = 'x') =>
  Array.from({ length: n }, (_, i) => JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: { model, max_tokens: 4, messages: [{ role: 'user', content: `${content}${i}` }] } })).join('\n');

async function startBatch(client: OpenAI, n: number, model = 'm', content = 'x') {
  const file = await client.files.create({ file: await toFile(Buffer.from(lines(n, model, content)), 'b.jsonl'), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

/** Time to the first byte of each of `count` streamed interactive requests, one after another (ms). */
async function firstTokenTimes(gw: TestGateway, count: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const res = await postChat(gw, { model: 'm', stream: true, messages: [{ role: 'user', content: 'interactive' }] });
    const reader = res.body!.getReader();
    await reader.read();
    times.push(performance.now() - started);
    while (!(await reader.read()).done);
    await sleep(30);
  }
  return times.sort((a, b) => a - b);
}

const p99 = (sorted: number[]) => sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)];

describe('a batch in idle capacity', () => {
  it("alone keeps the endpoint's flex share of slots busy; an interactive stream beside it keeps its time to first token", async () => {
    const { seen, script } = engine();
    await withGatewayOn([script], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 4 }])] }), async (gw) => {
      const alone = await firstTokenTimes(gw, 15);
      seen.most = 0;
      const batch = await startBatch(gw.client, 60);
      await until(async () => seen.most >= 3, 5_000);
      // Flex leaves one of the four slots to the other tiers, and takes the rest.
      expect(seen.most).toBe(3);
      const beside = await firstTokenTimes(gw, 15);
      expect((await gw.client.batches.retrieve(batch.id)).status).toBe('in_progress');
      // Operators see it: the admin API lists it with its lines by state, /metrics counts the fleet's lines.
      const listed = (await (await fetch(`${gw.url}/admin/v1/batches`, { headers: asAdmin })).json()).data;
      expect(listed).toMatchObject([{ id: batch.id, account: gw.account, status: 'in_progress', lines: { total: 60 } }]);
      const { queued, running, succeeded, errored } = listed[0].lines;
      // Claimed: the 3 lines served, and at most 8 waiting for a slot; the rest stay queued in Redis.
      expect(running).toBeGreaterThanOrEqual(3);
      expect(running).toBeLessThanOrEqual(3 + 8);
      expect(queued + running + succeeded + errored).toBe(60);
      await until(async () => /parley_batch_lines\{state="queued"[^}]*\} [1-9]/.test(await (await fetch(`${gw.url}/metrics`)).text()), 7_000);
      expect(await (await fetch(`${gw.url}/metrics`)).text()).toMatch(/parley_batch_lines_running_here\{[^}]*\} [1-9]/);
      expect(p99(beside)).toBeLessThanOrEqual(1.5 * p99(alone) + 50);
      await until(async () => (await gw.client.batches.retrieve(batch.id)).status === 'completed', 20_000);
    });
  });

  it("never fills the queue an interactive request needs: a full queue of batch lines still lets it wait, and it is served first", async () => {
    const slow: Script = async (req, res) => {
      if (!req.path.endsWith('/chat/completions')) return replyJson(res, { data: [] });
      await sleep(400);
      replyJson(res, completionBody(String(req.body.messages[0].content), { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 }));
    };
    await withGatewayOn([slow], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 1, maxQueue: 4 }])] }), async (gw) => {
      // Two teams' batches: each may take half the queue (accountQueueShare), so together they fill it.
      await startBatch(gw.client, 30);
      await startBatch(new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: (await makeAccount(gw.redis, 1)).key, maxRetries: 0 }), 30);
      const queuedFlex = async () => (await (await fetch(`${gw.url}/admin/v1/endpoints`, { headers: asAdmin })).json()).data[0].endpoints[0].queuedByTier.flex;
      await until(async () => (await queuedFlex()) === 4, 5_000);
      const started = performance.now();
      const reply = await gw.client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'interactive' }] });
      expect(reply.choices[0].message.content).toBe('interactive');
      // It waited for the one slot's current line only (at most 400 ms, then its own 400), not for the
      // four lines queued before it (1.6 s more).
      expect(performance.now() - started).toBeLessThan(1_400);
    });
  });

  it("applies the key's model limits and budget, and its account's rate limit, to every line", async () => {
    const quick: Script = (req, res) => (req.path.endsWith('/chat/completions') ? replyJson(res, completionBody('ok', { prompt_tokens: 1000, completion_tokens: 10, total_tokens: 1010 })) : replyJson(res, { data: [] }));
    const models = ([url]: string[]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }]), modelEntry('other', [{ kind: 'vllm', url }])] });
    await withGatewayOn([quick], models, async (gw) => {
      const clientOf = (key: string) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
      // Models: a key limited to `m` may not batch `other`.
      const limited = await makeAccount(gw.redis, 1);
      await setKeyLimits(gw.redis.client, limited.keyId, { models: ['m'] });
      expect(await startBatch(clientOf(limited.key), 2, 'other')).toMatchObject({ status: 'failed', errors: { data: [{ code: 'model_not_found' }] } });

      // Rate: 10 requests a minute, of which a batch's lines may fill half: the upload and the create are two, 3
      // lines run now, and the rest wait for the window rather than fail. The other half stays for the account's
      // own requests, from any of its keys: 5 more are served while the batch waits, then the window is full.
      // (Read from Redis: the key's own calls would take from the window.)
      const slow = await makeAccount(gw.redis, 1);
      await setAccountLimits(gw.redis.client, slow.account, { requestsPerMinute: 10, tokensPerMinute: null });
      // The window is a fixed minute: this part must not straddle two (it takes some 5 s).
      if (Date.now() % 60_000 > 50_000) await sleep(60_000 - (Date.now() % 60_000) + 100);
      const rated = clientOf(slow.key);
      const waiting = await startBatch(rated, 8);
      const counts = async () => (await readBatch(gw.redis.client, slow.account, waiting.id))!;
      await until(async () => (await counts()).counts.succeeded === 3, 5_000);
      const scriptCalls = async () => Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(await gw.redis.client.info('commandstats'))?.[1] ?? 0);
      const before = await scriptCalls();
      await sleep(1_500);
      // A batch whose lines cannot run now waits a second before it is tried again: its five lines claimed, refused
      // and released in a loop made Redis run some 2,000 scripts in this time, where the wait leaves a few dozen.
      expect((await scriptCalls()) - before).toBeLessThan(200);
      expect(await counts()).toMatchObject({ status: 'in_progress', counts: { succeeded: 3, errored: 0 } });
      const interactive = clientOf((await createApiKey(gw.redis.client, TEST_KEY_SECRET, slow.account, 'interactive')).key);
      for (let i = 0; i < 5; i++) expect((await interactive.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })).choices).toHaveLength(1);
      await expect(interactive.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })).rejects.toMatchObject({ status: 429, error: { code: 'rate_limit_exceeded' } });
      await expect(rated.files.list()).rejects.toMatchObject({ status: 429, error: { code: 'rate_limit_exceeded' } });
      expect((await counts()).counts.succeeded).toBe(3);

      // Tokens: a line that may take more than half the account's tokens a minute can never run: it fails with
      // OpenAI's "Request too large" rather than wait for its batch to expire. The same request sent by the
      // account's own key fits the whole window, and is served.
      const wide = await makeAccount(gw.redis, 1);
      await setAccountLimits(gw.redis.client, wide.account, { requestsPerMinute: null, tokensPerMinute: 1_000 });
      const wideClient = clientOf(wide.key);
      let large = await startBatch(wideClient, 2, 'm', 'a'.repeat(600));
      await until(async () => (large = await wideClient.batches.retrieve(large.id)).status === 'completed', 10_000);
      expect(large.request_counts).toMatchObject({ completed: 0, failed: 2 });
      const tooLarge = (await (await wideClient.files.content(large.error_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l).response);
      for (const r of tooLarge) expect(r).toMatchObject({ status_code: 429, body: { error: { code: 'rate_limit_exceeded', message: expect.stringContaining('Request too large') } } });
      expect((await postChat({ url: gw.url, apiKey: wide.key }, { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: `${'a'.repeat(600)}0` }] })).status).toBe(200);

      // Budget: a key whose budget pays for two lines fails the rest with its budget's error. Each line's prompt
      // of about 1,000 bytes is held for as about 1,000 tokens, and costs 510 micro-units at flex.
      const budgeted = await makeAccount(gw.redis, 1);
      await setKeyLimits(gw.redis.client, budgeted.keyId, { budget: { limit: 1100, period: 'total' } });
      const client = clientOf(budgeted.key);
      const spent = await startBatch(client, 6, 'm', 'a'.repeat(990));
      let b = await client.batches.retrieve(spent.id);
      await until(async () => (b = await client.batches.retrieve(spent.id)).status === 'completed', 20_000);
      expect(b.request_counts).toMatchObject({ completed: 2, failed: 4 });
      const errors = (await (await client.files.content(b.error_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
      expect(new Set(errors.map((e) => `${e.response.status_code} ${e.response.body.error.code}`))).toEqual(new Set(['429 insufficient_quota']));
    });
  });
  it("runs at most half of its account's bound of requests in flight, leaving the rest to the account's own requests", async () => {
    const { seen, script } = engine();
    await withGatewayOn([script], ([url]) => ({ rateLimits: { concurrentRequests: 4 }, models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 16 }])] }), async (gw) => {
      const batch = await startBatch(gw.client, 6);
      await until(async () => seen.now > 0);
      // Two lines run; the account's own two requests go in beside them.
      const own = await Promise.all([0, 1].map(() => postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'interactive' }] })));
      expect(own.map((r) => r.status)).toEqual([200, 200]);
      await until(async () => (await gw.client.batches.retrieve(batch.id)).status === 'completed', 20_000);
      expect(seen.most).toBeLessThanOrEqual(4);
      expect((await gw.client.batches.retrieve(batch.id)).request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
    });
  });
});
