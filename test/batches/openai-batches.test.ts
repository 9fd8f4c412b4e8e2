// OpenAI's Files and Batch API, as the official `openai` client drives them:
// upload, create, poll, read the output and error files, cancel, list; lines
// the API refuses, a window that ends, a balance that runs out, and another
// account's files and batches out of reach.
import OpenAI, { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { redisKeys } from '../../src/redis/keys.js';
import { usageEventsOf } from '../support/ledger.js';
import { completionBody, greeting, replyJson, sleep, until, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, withGatewayOn, type TestGateway } from '../support/gateway.js';

const oneModel = (extra: Record<string, unknown> = {}, gateway: Record<string, unknown> = {}) => ([url]: string[]) => ({ gateway, models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 4 }], extra)] });

const chatLine = (i: number, body: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: `question ${i}` }], max_tokens: 5, ...body } });

async function upload(client: OpenAI, lines: string[]) {
  return client.files.create({ file: await toFile(Buffer.from(lines.join('\n') + '\n'), 'input.jsonl'), purpose: 'batch' });
}

async function runBatch(client: OpenAI, lines: string[], endpoint: '/v1/chat/completions' | '/v1/embeddings' | '/v1/completions' | '/v1/responses' = '/v1/chat/completions') {
  const file = await upload(client, lines);
  return client.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h', metadata: { job: 'nightly-eval' } });
}

async function ended(client: OpenAI, id: string, timeoutMs = 10_000) {
  let batch = await client.batches.retrieve(id);
  await until(async () => {
    batch = await client.batches.retrieve(id);
    return ['completed', 'failed', 'expired', 'cancelled'].includes(batch.status);
  }, timeoutMs);
  return batch;
}

const jsonl = async (client: OpenAI, fileId: string | null | undefined) =>
  fileId ? (await (await client.files.content(fileId)).text()).trim().split('\n').map((l) => JSON.parse(l)) : [];

const events = (gw: TestGateway, account = gw.account) => usageEventsOf(gw.redis.client, account);

describe("OpenAI's Batch API", () => {
  it('runs every line at flex through its endpoint, and hands back the output file in input order, each line charged once at flex prices', async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      // A line may not stream or pick its tier: a batch is read whole, at flex.
      const created = await runBatch(gw.client, Array.from({ length: 12 }, (_, i) => chatLine(i, i === 11 ? { stream: true, service_tier: 'priority' } : {})));
      expect(created).toMatchObject({ object: 'batch', endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'nightly-eval' }, request_counts: { total: 12 } });
      expect(['validating', 'in_progress', 'finalizing', 'completed']).toContain(created.status);
      const batch = await ended(gw.client, created.id);
      expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 12, completed: 12, failed: 0 }, error_file_id: null });
      expect(batch.completed_at).toBeGreaterThanOrEqual(batch.created_at);
      const output = await jsonl(gw.client, batch.output_file_id);
      expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: 12 }, (_, i) => `req-${i}`));
      for (const line of output) {
        expect(line).toMatchObject({ id: expect.stringMatching(/^batch_req_/), response: { status_code: 200, request_id: expect.any(String), body: { object: 'chat.completion', service_tier: 'flex' } }, error: null });
        expect(line.response.body.choices[0].message.content).toBe('Hello there');
      }
      const charged = (await events(gw)).filter((e) => e.outcome === 'complete');
      expect(charged).toHaveLength(12);
      expect(new Set(charged.map((e) => e.tier))).toEqual(new Set(['flex']));
      expect(new Set(charged.map((e) => e.requestId))).toEqual(new Set(output.map((l) => l.response.request_id)));
      const spent = charged.reduce((sum, e) => sum + e.charged, 0);
      const after = (await readBalance(gw.redis.client, gw.account))!;
      expect(before.granted - after.granted).toBe(spent);
      expect(after.held).toBe(0);
      // usage and cost: 100 prompt tokens, 64 of them cached, 5 out, per line.
      expect(batch.usage).toMatchObject({ input_tokens: 1200, input_tokens_details: { cached_tokens: 768 }, output_tokens: 60 });
      // The output file is listed as the account's, with its size.
      const outputFile = await gw.client.files.retrieve(batch.output_file_id!);
      expect(outputFile).toMatchObject({ purpose: 'batch_output', filename: `${batch.id}_output.jsonl` });
      expect(outputFile.bytes).toBe(Buffer.byteLength(await (await gw.client.files.content(batch.output_file_id!)).text()));
    });
  });

  it('serves every batch endpoint: completions, embeddings and responses', async () => {
    const script: Script = (req, res) => {
      if (req.path.endsWith('/embeddings')) return replyJson(res, { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2] }], model: 'e', usage: { prompt_tokens: 3, total_tokens: 3 } });
      if (req.path.endsWith('/completions') && !req.path.endsWith('/chat/completions')) return replyJson(res, { id: 'c', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: 'done', finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
      return replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }));
    };
    const config = ([url]: string[]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }], { api: ['chat', 'completions', 'embeddings'] })] });
    await withGatewayOn([script], config, async (gw) => {
      const line = (url: string, body: Record<string, unknown>) => JSON.stringify({ custom_id: 'only', method: 'POST', url, body: { model: 'm', ...body } });
      const cases = [
        ['/v1/completions', { prompt: 'say', max_tokens: 3 }, 'text_completion'],
        ['/v1/embeddings', { input: 'embed me' }, 'list'],
        ['/v1/responses', { input: 'hi', max_output_tokens: 16 }, 'response'],
      ] as const;
      for (const [endpoint, body, object] of cases) {
        const batch = await ended(gw.client, (await runBatch(gw.client, [line(endpoint, body)], endpoint)).id);
        expect(batch.status, endpoint).toBe('completed');
        const [out] = await jsonl(gw.client, batch.output_file_id);
        expect(out.response.body.object, endpoint).toBe(object);
      }
    });
  });

  it('fails a batch whose input file has bad lines, naming each, and runs nothing', async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const lines = [
        chatLine(0),
        '{not json',
        JSON.stringify({ custom_id: 'x', method: 'GET', url: '/v1/chat/completions', body: { model: 'm' } }),
        JSON.stringify({ custom_id: 'y', method: 'POST', url: '/v1/embeddings', body: { model: 'm' } }),
        chatLine(0),
      ];
      const batch = await runBatch(gw.client, lines);
      expect(batch.status).toBe('failed');
      expect(batch.errors?.data?.map((e) => [e.code, e.line])).toEqual([['invalid_json_line', 2], ['invalid_method', 3], ['mismatched_endpoint', 4], ['duplicate_custom_id', 5]]);
      const unknownModel = await runBatch(gw.client, [chatLine(0, { model: 'no-such-model' })]);
      expect(unknownModel).toMatchObject({ status: 'failed', errors: { data: [{ code: 'model_not_found', line: 1 }] } });
      expect((await events(gw)).length).toBe(0);
    });
  });

  it('writes lines the API refuses or the upstream fails to the error file, in the API\'s error shape, uncharged', async () => {
    const script: Script = (req, res) => (String(req.body.messages?.[0]?.content).includes('boom') ? replyJson(res, { error: { message: 'engine crashed' } }, 500) : greeting()(req, res));
    await withGatewayOn([script], oneModel({}, { failover: { maxAttempts: 1 } }), async (gw) => {
      const lines = [chatLine(0), JSON.stringify({ custom_id: 'bad', method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: 'not a list' } }), chatLine(2, { messages: [{ role: 'user', content: 'boom' }] })];
      const batch = await ended(gw.client, (await runBatch(gw.client, lines)).id);
      expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 3, completed: 1, failed: 2 } });
      const errors = await jsonl(gw.client, batch.error_file_id);
      expect(errors.map((e) => [e.custom_id, e.response.status_code, e.response.body.error.type])).toEqual([['bad', 400, 'invalid_request_error'], ['req-2', 502, 'server_error']]);
      expect((await events(gw)).filter((e) => e.charged > 0)).toHaveLength(1);
    });
  });

  it('cancels: lines not yet run are cancelled and uncharged, those running finish', async () => {
    const slow: Script = async (req, res) => {
      await sleep(150);
      greeting()(req, res);
    };
    await withGatewayOn([slow], oneModel({}, { batches: { concurrency: 2 } }), async (gw) => {
      const created = await runBatch(gw.client, Array.from({ length: 20 }, (_, i) => chatLine(i)));
      await until(async () => (await gw.client.batches.retrieve(created.id)).request_counts!.completed >= 2);
      const cancelling = await gw.client.batches.cancel(created.id);
      expect(['cancelling', 'cancelled']).toContain(cancelling.status);
      const batch = await ended(gw.client, created.id);
      expect(batch.status).toBe('cancelled');
      expect(batch.cancelled_at).not.toBeNull();
      const done = batch.request_counts!.completed;
      expect(done).toBeLessThan(20);
      const errors = await jsonl(gw.client, batch.error_file_id);
      expect(errors).toHaveLength(20 - done);
      expect(errors[0]).toMatchObject({ response: null, error: { code: 'batch_cancelled' } });
      expect((await events(gw)).filter((e) => e.outcome === 'complete')).toHaveLength(done);
      await expect(gw.client.batches.cancel(created.id)).rejects.toMatchObject({ status: 409 });
    });
  });

  it('expires a batch past its window: the rest of its lines expired and uncharged', async () => {
    const slow: Script = async (req, res) => {
      await sleep(300);
      greeting()(req, res);
    };
    await withGatewayOn([slow], oneModel({}, { batches: { concurrency: 1, completionWindowS: 1 } }), async (gw) => {
      const batch = await ended(gw.client, (await runBatch(gw.client, Array.from({ length: 10 }, (_, i) => chatLine(i)))).id);
      expect(batch.status).toBe('expired');
      expect(batch.expired_at).not.toBeNull();
      const done = batch.request_counts!.completed;
      expect(done).toBeGreaterThan(0);
      expect(done).toBeLessThan(10);
      const errors = await jsonl(gw.client, batch.error_file_id);
      expect(errors.map((e) => e.error.code)).toEqual(Array(10 - done).fill('batch_expired'));
      expect((await events(gw)).filter((e) => e.outcome === 'complete')).toHaveLength(done);
    });
  });

  it('fails the lines the balance no longer pays for, and never overspends it', async () => {
    // Each line: 100 prompt tokens (64 cached), 5 out at half of 1/0.1/2 per million: 26 micro-units or so.
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const { account, key } = await makeAccount(gw.redis, 0.0001);
      const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
      const batch = await ended(client, (await runBatch(client, Array.from({ length: 10 }, (_, i) => chatLine(i)))).id);
      expect(batch.status).toBe('completed');
      const { completed, failed } = batch.request_counts!;
      expect(completed).toBeGreaterThan(0);
      expect(failed).toBeGreaterThan(0);
      expect(completed + failed).toBe(10);
      const errors = await jsonl(client, batch.error_file_id);
      expect(new Set(errors.map((e) => `${e.response.status_code} ${e.response.body.error.code}`))).toEqual(new Set(['402 insufficient_balance']));
      const balance = (await readBalance(gw.redis.client, account))!;
      expect(balance.granted).toBeGreaterThanOrEqual(0);
      expect(balance.held).toBe(0);
      const charged = (await events(gw, account)).reduce((sum, e) => sum + e.charged, 0);
      expect(100 - balance.granted).toBe(charged);
    });
  });

  it("keeps an account's files and batches its own: another key gets 404, and lists only its own", async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const batch = await ended(gw.client, (await runBatch(gw.client, [chatLine(0)])).id);
      const other = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: (await makeAccount(gw.redis, 1)).key, maxRetries: 0 });
      await expect(other.batches.retrieve(batch.id)).rejects.toMatchObject({ status: 404 });
      await expect(other.batches.cancel(batch.id)).rejects.toMatchObject({ status: 404 });
      await expect(other.files.retrieve(batch.input_file_id)).rejects.toMatchObject({ status: 404 });
      await expect(other.files.content(batch.output_file_id!)).rejects.toMatchObject({ status: 404 });
      await expect(other.files.delete(batch.input_file_id)).rejects.toMatchObject({ status: 404 });
      await expect(other.batches.create({ input_file_id: batch.input_file_id, endpoint: '/v1/chat/completions', completion_window: '24h' })).rejects.toMatchObject({ status: 400 });
      expect((await other.batches.list()).data).toEqual([]);
      expect((await other.files.list()).data).toEqual([]);
      expect((await gw.client.batches.list()).data.map((b) => b.id)).toEqual([batch.id]);
      // The input file is still there after the batch; both it and the output go on DELETE.
      expect((await gw.client.files.list()).data.map((f) => f.id).sort()).toEqual([batch.input_file_id, batch.output_file_id].sort());
      expect((await gw.client.files.list({ purpose: 'batch_output' })).data.map((f) => f.id)).toEqual([batch.output_file_id]);
      expect((await gw.client.files.list({ purpose: 'batch' })).data.map((f) => f.id)).toEqual([batch.input_file_id]);
      expect(await gw.client.files.delete(batch.output_file_id!)).toMatchObject({ id: batch.output_file_id, deleted: true });
      await expect(gw.client.files.content(batch.output_file_id!)).rejects.toMatchObject({ status: 404 });
      expect((await gw.client.files.list()).data.map((f) => f.id)).toEqual([batch.input_file_id]);
      expect((await gw.client.files.list({ purpose: 'batch_output' })).data).toEqual([]);
    });
  });

  it('keeps files, ended batches and their results for keepDays, then forgets them', async () => {
    // 0.00002 days: 1.7 s.
    await withGatewayOn([greeting()], oneModel({}, { batches: { keepDays: 0.00002 } }), async (gw) => {
      const batch = await ended(gw.client, (await runBatch(gw.client, [chatLine(0)])).id);
      expect((await gw.client.files.list()).data).toHaveLength(2);
      // Its lines are counted against what the account may keep as long as they are kept: from its end, not from
      // the end of its 24-hour window.
      const stored = redisKeys.storedBytes(gw.account);
      expect(Number(await gw.redis.client.zscore(stored.items, `batch:${batch.id}`))).toBeLessThan(Date.now() + 2_000);
      await sleep(2_000);
      await expect(gw.client.batches.retrieve(batch.id)).rejects.toMatchObject({ status: 404 });
      await expect(gw.client.files.content(batch.output_file_id!)).rejects.toMatchObject({ status: 404 });
      expect((await gw.client.batches.list()).data).toEqual([]);
      expect((await gw.client.files.list()).data).toEqual([]);
      expect(await gw.redis.client.keys(`*${batch.id}*`)).toEqual([]);
      expect(await gw.redis.client.exists(stored.items, stored.sizes)).toBe(0);
    });
  });

  it('finishes a batch whose finalizing replica stalled, once a lease has passed', async () => {
    await withGatewayOn([greeting()], oneModel({}, { batches: { leaseMs: 1000 } }), async (gw) => {
      const batch = await ended(gw.client, (await runBatch(gw.client, [chatLine(0), chatLine(1)])).id);
      // As a replica leaves it when it dies mid-finalize: finalizing, still in the fleet's queue, its files not made.
      const keys = redisKeys.batch(gw.account, batch.id);
      await gw.redis.client.hset(keys.meta, 'status', 'finalizing', 'finalizing_at', Date.now(), 'output_file_id', '');
      await gw.redis.client.zadd(redisKeys.activeBatches, Date.now(), `${gw.account} ${batch.id}`);
      await sleep(500);
      expect((await gw.client.batches.retrieve(batch.id)).status).toBe('finalizing');
      const again = await ended(gw.client, batch.id);
      expect(again).toMatchObject({ status: 'completed', request_counts: { completed: 2 } });
      expect(await jsonl(gw.client, again.output_file_id)).toHaveLength(2);
    });
  });

  it("keeps a queued batch whose hash is not written yet, and drops one whose storing never finished, a minute on", async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const queued = async () => gw.redis.client.zrange(redisKeys.activeBatches, 0, -1);
      await gw.redis.client.zadd(redisKeys.activeBatches, Date.now() - 120_000, `${gw.account} batch_abandoned`, Date.now(), `${gw.account} batch_being_stored`);
      await until(async () => !(await queued()).includes(`${gw.account} batch_abandoned`));
      await sleep(600);
      expect(await queued()).toEqual([`${gw.account} batch_being_stored`]);
    });
  });

  it('lists batches newest first, a page at a time', async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        ids.unshift((await runBatch(gw.client, [chatLine(i)])).id);
        await sleep(2);
      }
      const first = await gw.client.batches.list({ limit: 2 });
      expect(first.data.map((b) => b.id)).toEqual(ids.slice(0, 2));
      expect(first.has_more).toBe(true);
      const all: string[] = [];
      for await (const b of gw.client.batches.list({ limit: 2 })) all.push(b.id);
      expect(all).toEqual(ids);
    });
  });

  it('refuses an upload that is not for a batch, too large, or without a file, in OpenAI\'s error shape', async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      await expect(gw.client.files.create({ file: await toFile(Buffer.from(chatLine(0)), 'x.jsonl'), purpose: 'fine-tune' })).rejects.toMatchObject({ status: 400, error: { param: 'purpose' } });
      const noFile = await fetch(`${gw.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${gw.apiKey}` }, body: (() => { const f = new FormData(); f.set('purpose', 'batch'); return f; })() });
      expect(noFile.status).toBe(400);
      expect((await noFile.json()).error.param).toBe('file');
      const big = Buffer.alloc(33 * 1024 * 1024, 'a');
      const tooLarge = await fetch(`${gw.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${gw.apiKey}` }, body: (() => { const f = new FormData(); f.set('purpose', 'batch'); f.set('file', new Blob([big]), 'big.jsonl'); return f; })() });
      expect(tooLarge.status).toBe(413);
      const json = await fetch(`${gw.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${gw.apiKey}`, 'content-type': 'application/json' }, body: '{}' });
      expect(json.status).toBe(400);
      await expect(gw.client.batches.create({ input_file_id: 'file-nope', endpoint: '/v1/chat/completions', completion_window: '24h' })).rejects.toMatchObject({ status: 400, error: { param: 'input_file_id' } });
      await expect(gw.client.batches.create({ input_file_id: 'x', endpoint: '/v1/moderations' as '/v1/embeddings', completion_window: '24h' })).rejects.toMatchObject({ status: 400, error: { param: 'endpoint' } });
      expect((await gw.client.files.list()).data).toEqual([]);
    });
  });
});
