// A batch is the fleet's job: three replicas on one Redis share its lines; a
// replica killed with -9 mid-batch loses none and has none charged twice;
// every replica stopped and one started again finds every batch, file and
// result. And the settlement that charges a line writes its result, so a line
// run a second time is never charged a second time. What an account keeps is
// counted fleet-wide: uploads and batches sent through three replicas at once
// cannot pass its cap together, nor can batches made through three replicas
// at once pass the most an account may have running.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { MAX_ACTIVE_BATCHES } from '../../src/batches/batch-store.js';
import { STORED_ITEM_OVERHEAD_BYTES } from '../../src/batches/stored-bytes.js';
import { holdCredits, readBalance } from '../../src/billing/credit-ledger.js';
import { readUsageEvents } from '../../src/billing/usage-events.js';
import { redisKeys } from '../../src/redis/keys.js';
import { settleHold } from '../support/ledger.js';
import { completionBody, replyJson, sleep, startFakeUpstream, until } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, startTestGateway, TEST_KEY_SECRET } from '../support/gateway.js';
import { startParleyServe, type ParleyProcess } from '../support/parley-process.js';
import { startTestRedis } from '../support/redis.js';

const LINES = 300;

describe('a batch on a fleet', () => {
  it('is shared by three replicas; one killed with -9 mid-batch loses no line and charges none twice; the batch outlives every replica', async () => {
    // Each reply takes 40 ms, and says which line it answers, so the output can be checked line by line.
    // While `held` is set, replies wait for it: every replica's lines stay in flight.
    let held: Promise<void> | undefined;
    let release = () => {};
    const upstream = await startFakeUpstream(async (req, res) => {
      await sleep(40);
      await held;
      const content = String(req.body.messages?.[0]?.content ?? '');
      replyJson(res, completionBody(`answer to ${content}`, { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 }));
    });
    const dir = mkdtempSync(join(tmpdir(), 'parley-batch-fleet-'));
    const redis = await startTestRedis();
    const config = { gateway: { requestLog: false, engineLoad: { intervalMs: 0 }, batches: { concurrency: 8, leaseMs: 1500 } }, billing: { holdTtlMs: 1000 }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url, maxConcurrent: 24 }])] };
    writeFileSync(join(dir, 'routing.yaml'), stringify(config));
    const env = { REDIS_URL: redis.url, PARLEY_KEY_SECRET: TEST_KEY_SECRET };
    const serve = (name: string) => startParleyServe(['--config', join(dir, 'routing.yaml'), '--data-dir', join(dir, name)], env);
    let gw = await startTestGateway(config, { redis });
    const processes: ParleyProcess[] = [await serve('a'), await serve('b')];
    try {
      const { account, key } = await makeAccount(redis, 10);
      const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
      const before = (await readBalance(redis.client, account))!;
      const lines = Array.from({ length: LINES }, (_, i) => JSON.stringify({ custom_id: `line-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: `line-${i}` }] } }));
      const file = await client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'fleet.jsonl'), purpose: 'batch' });
      const { id } = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });

      // Once the lines are well under way, replies are held so that every replica has lines in flight
      // (each claims under a token of its own: the in-flight set's "<line>:<token>"); then one replica dies.
      // Without the hold, on a slow machine, the batch could end between the check and the kill.
      const replicasRunning = async () => new Set((await redis.client.zrange(redisKeys.batch(account, id).inFlight, 0, -1)).map((m) => m.split(':')[1])).size;
      await until(async () => (await client.batches.retrieve(id)).request_counts!.completed >= LINES / 4, 20_000);
      held = new Promise((resolve) => (release = resolve));
      await until(async () => (await replicasRunning()) === 3, 20_000);
      await processes[0].stop('SIGKILL');
      held = undefined;
      release();

      let batch = await client.batches.retrieve(id);
      await until(async () => (batch = await client.batches.retrieve(id)).status === 'completed', 30_000);
      expect(batch.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
      const output = (await (await client.files.content(batch.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
      expect(output.map((l) => l.custom_id)).toEqual(lines.map((_, i) => `line-${i}`));
      for (const line of output) expect(line.response.body.choices[0].message.content).toBe(`answer to ${line.custom_id}`);

      // Each line charged once: one complete usage event per line, the books equal to the events.
      await until(async () => (await readBalance(redis.client, account))!.held === 0, 5_000);
      const complete = [];
      let charged = 0;
      for await (const e of readUsageEvents(redis.client, account)) {
        charged += e.charged;
        if (e.outcome === 'complete') complete.push(e.requestId);
      }
      expect(new Set(complete).size).toBe(complete.length);
      expect(complete.sort()).toEqual(output.map((l) => l.response.request_id).sort());
      expect(before.granted - (await readBalance(redis.client, account))!.granted).toBe(charged);
      // The lines in flight on the dead replica were claimed again, after their leases lapsed.
      const tries = (await redis.client.hvals(redisKeys.batch(account, id).tries)).map(Number);
      expect(Math.max(...tries)).toBeGreaterThanOrEqual(2);

      // Every replica stops; one starts again, on the same Redis, and finds everything.
      await processes[1].stop('SIGTERM');
      await gw.close();
      gw = await startTestGateway(config, { redis });
      const again = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
      expect((await again.batches.retrieve(id)).status).toBe('completed');
      expect((await again.files.list()).data.map((f) => f.id).sort()).toEqual([file.id, batch.output_file_id].sort());
      expect((await (await again.files.content(batch.output_file_id!)).text()).trim().split('\n')).toHaveLength(LINES);
      expect(await (await again.files.content(file.id)).text()).toBe(lines.join('\n'));
    } finally {
      release();
      for (const p of processes) await p.stop('SIGKILL');
      await gw.close();
      await redis.stop();
      await upstream.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('hands the lines a stopping replica runs back to the queue at once, unpaid, for the others', async () => {
    const upstream = await startFakeUpstream(async (_req, res) => {
      await sleep(200);
      replyJson(res, completionBody('ok', { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 }));
    });
    const config = { gateway: { batches: { concurrency: 4 } }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url, maxConcurrent: 16 }])] };
    const redis = await startTestRedis();
    const first = await startTestGateway(config, { redis });
    const second = await startTestGateway(config, { redis });
    try {
      const { account, key } = await makeAccount(redis, 1);
      const client = new OpenAI({ baseURL: `${second.url}/v1`, apiKey: key, maxRetries: 0 });
      const lines = Array.from({ length: 40 }, (_, i) => JSON.stringify({ custom_id: `l${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: `x${i}` }] } }));
      const file = await client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'x.jsonl'), purpose: 'batch' });
      const { id } = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await until(async () => (await first.context.batches!.linesRunning) === 4);
      await first.close();
      // Handed back, not left to their leases (30 s): the other replica finishes the batch in a few seconds.
      let batch = await client.batches.retrieve(id);
      await until(async () => (batch = await client.batches.retrieve(id)).status === 'completed', 10_000);
      expect(batch.request_counts).toEqual({ total: 40, completed: 40, failed: 0 });
      const complete = [];
      for await (const e of readUsageEvents(redis.client, account)) if (e.outcome === 'complete') complete.push(e.requestId);
      expect(complete).toHaveLength(40);
    } finally {
      await second.close();
      await redis.stop();
      await upstream.close();
    }
  });

  it("charges a line's reply once, however many of its runs complete: the second finds the result and is released", async () => {
    const redis = await startTestRedis();
    try {
      const { account, keyId } = await makeAccount(redis, 1);
      const results = redisKeys.batch(account, 'batch_x').results;
      await redis.client.hset(results, '#total', 1);
      const prices = { missPico: 1_000_000, hitPico: 100_000, outputPico: 2_000_000 };
      const settlement = (hold: string, text: string) => ({
        account, keyId, requestId: hold, model: 'm', endpoint: 'e', outcome: 'complete' as const, usage: { prompt_tokens: 10, completion_tokens: 5, cached_tokens: 0 }, cost: 20,
        batchResult: { resultsKey: results, line: '0', result: text },
      });
      for (const hold of ['run-1', 'run-2']) await holdCredits(redis.client, [{ hold: { account, requestId: hold, ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 5 } }]);
      expect(await settleHold(redis.client, settlement('run-1', 'sfirst'))).toBe(20);
      expect(await settleHold(redis.client, settlement('run-2', 'ssecond'))).toBeUndefined();
      expect(await redis.client.hmget(results, '0', '#succeeded', '#cost')).toEqual(['sfirst', '1', '20']);
      expect(await readBalance(redis.client, account)).toMatchObject({ granted: 1_000_000 - 20, held: 0 });
      // A batch that is gone (deleted, or kept past its time) charges nothing.
      await redis.client.del(results);
      await holdCredits(redis.client, [{ hold: { account, requestId: 'run-3', ttlMs: 60_000, prices, promptTokens: 10, n: 1, maxReplyTokens: 5 } }]);
      expect(await settleHold(redis.client, { ...settlement('run-3', 'sthird'), batchResult: { resultsKey: results, line: '1', result: 'sthird' } })).toBeUndefined();
      expect(await redis.client.exists(results)).toBe(0);
      expect(await readBalance(redis.client, account)).toMatchObject({ granted: 1_000_000 - 20, held: 0 });
    } finally {
      await redis.stop();
    }
  });
  it("counts one account's uploads and batches against its cap across three replicas at once, and each account's apart", async () => {
    const redis = await startTestRedis();
    const line = JSON.stringify({ custom_id: 'x', method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'a'.repeat(1500) }] } });
    const size = Buffer.byteLength(line);
    const config = { gateway: { batches: { concurrency: 0, storedBytesPerAccount: Math.floor(4.5 * (size + STORED_ITEM_OVERHEAD_BYTES)) } }, models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] };
    const replicas = [await startTestGateway(config, { redis }), await startTestGateway(config, { redis }), await startTestGateway(config, { redis })];
    try {
      const tenants = [await makeAccount(redis, 1), await makeAccount(redis, 1)];
      const clients = tenants.map(({ key }) => replicas.map((r) => new OpenAI({ baseURL: `${r.url}/v1`, apiKey: key, maxRetries: 0 })));
      const upload = (client: OpenAI) => toFile(Buffer.from(line), 'x.jsonl').then((file) => client.files.create({ file, purpose: 'batch' }));
      // Twelve uploads from each account at once, four through each replica.
      const uploads = await Promise.all(clients.map((own) => Promise.allSettled(Array.from({ length: 12 }, (_, i) => upload(own[i % 3])))));
      for (const results of uploads) {
        expect(results.filter((u) => u.status === 'fulfilled')).toHaveLength(4);
        for (const u of results) if (u.status === 'rejected') expect(u.reason).toMatchObject({ status: 400, error: { code: 'storage_limit_reached' } });
      }
      // With room for one more copy of a file's lines, three batches made from it at once through three replicas: one is made.
      const [own] = clients;
      const kept = (await own[0].files.list()).data;
      await own[0].files.delete(kept[0].id);
      const batches = await Promise.allSettled(own.map((client) => client.batches.create({ input_file_id: kept[1].id, endpoint: '/v1/chat/completions', completion_window: '24h' })));
      expect(batches.filter((b) => b.status === 'fulfilled')).toHaveLength(1);
      expect((await own[1].batches.list()).data).toHaveLength(1);
    } finally {
      for (const r of replicas) await r.close();
      await redis.stop();
    }
  });

  it('makes no more batches than an account may have running when they are asked for through three replicas at once', async () => {
    const redis = await startTestRedis();
    const config = { gateway: { batches: { concurrency: 0 } }, models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] };
    const replicas = [await startTestGateway(config, { redis }), await startTestGateway(config, { redis }), await startTestGateway(config, { redis })];
    try {
      const { account, key } = await makeAccount(redis, 1);
      // Room for five more: the account's count as if it had that many batches running, none ending before tomorrow.
      const running = Array.from({ length: MAX_ACTIVE_BATCHES - 5 }, (_, i) => [Date.now() + 86_400_000, `batch_running_${i}`]).flat();
      await redis.client.zadd(redisKeys.accountActiveBatches(account), ...running);
      const clients = replicas.map((r) => new Anthropic({ baseURL: r.url, apiKey: key, maxRetries: 0 }));
      const request = { custom_id: 'only', params: { model: 'm', max_tokens: 4, messages: [{ role: 'user' as const, content: 'hi' }] } };
      const made = await Promise.allSettled(Array.from({ length: 15 }, (_, i) => clients[i % 3].messages.batches.create({ requests: [request] })));
      expect(made.filter((b) => b.status === 'fulfilled')).toHaveLength(5);
      for (const b of made) if (b.status === 'rejected') expect(b.reason).toMatchObject({ status: 429, error: { error: { type: 'rate_limit_error' } } });
      expect(await redis.client.zcard(redisKeys.accountActiveBatches(account))).toBe(MAX_ACTIVE_BATCHES);
      // The ten refused kept nothing: no batch, no place in the fleet's queue.
      expect((await clients[0].messages.batches.list()).data).toHaveLength(5);
      expect((await redis.client.zrange(redisKeys.activeBatches, 0, -1)).filter((m) => m.startsWith(`${account} `))).toHaveLength(5);
    } finally {
      for (const r of replicas) await r.close();
      await redis.stop();
    }
  });
});
