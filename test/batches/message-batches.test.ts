// Anthropic's Message Batches, as @anthropic-ai/sdk drives them: create,
// retrieve, list, results (through the batch's results_url), cancel, delete,
// errored requests in Anthropic's error shape, and another account's batches
// out of reach.
import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { readUsageEvents } from '../../src/billing/usage-events.js';
import { redisKeys } from '../../src/redis/keys.js';
import { greeting, sleep, until, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, withGatewayOn, type TestGateway } from '../support/gateway.js';

const oneModel = (gateway: Record<string, unknown> = {}) => ([url]: string[]) => ({ gateway, models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 4 }])] });
const anthropicFor = (gw: TestGateway, apiKey = gw.apiKey) => new Anthropic({ baseURL: gw.url, apiKey, maxRetries: 0 });
const request = (i: number, content = `question ${i}`) => ({ custom_id: `q-${i}`, params: { model: 'm', max_tokens: 16, messages: [{ role: 'user' as const, content }] } });

async function ended(client: Anthropic, id: string) {
  let batch = await client.messages.batches.retrieve(id);
  await until(async () => (batch = await client.messages.batches.retrieve(id)).processing_status === 'ended', 10_000);
  return batch;
}

async function results(client: Anthropic, id: string) {
  const all = [];
  for await (const r of await client.messages.batches.results(id)) all.push(r);
  return all;
}

describe("Anthropic's Message Batches", () => {
  it('runs each request at flex and gives its results as Anthropic messages, errored ones in its error shape', async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const client = anthropicFor(gw);
      const created = await client.messages.batches.create({
        requests: [request(0), request(1), { custom_id: 'broken', params: { model: 'm', max_tokens: 16, messages: 'nope' as never } }],
      });
      expect(created).toMatchObject({ type: 'message_batch', processing_status: 'in_progress', request_counts: { processing: 3 }, results_url: null });
      expect(created.id).toMatch(/^msgbatch_/);
      const batch = await ended(client, created.id);
      expect(batch.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 1, canceled: 0, expired: 0 });
      expect(batch.ended_at).not.toBeNull();
      expect(batch.results_url).toBe(`${gw.url}/v1/messages/batches/${batch.id}/results`);
      const lines = await results(client, batch.id);
      expect(lines.map((l) => [l.custom_id, l.result.type])).toEqual([['q-0', 'succeeded'], ['q-1', 'succeeded'], ['broken', 'errored']]);
      const first = lines[0].result;
      expect(first.type === 'succeeded' && first.message).toMatchObject({ type: 'message', role: 'assistant', content: [{ type: 'text', text: 'Hello there' }], usage: { service_tier: 'batch' } });
      const broken = lines[2].result;
      expect(broken.type === 'errored' && broken.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
      const charged = [];
      for await (const e of readUsageEvents(gw.redis.client, gw.account)) if (e.charged > 0) charged.push(e);
      expect(charged.map((e) => [e.api, e.tier])).toEqual([['messages', 'flex'], ['messages', 'flex']]);
    });
  });

  it('cancels a batch: requests not yet run are canceled; then lists and deletes it', async () => {
    const slow: Script = async (req, res) => {
      await sleep(150);
      greeting()(req, res);
    };
    await withGatewayOn([slow], oneModel({ batches: { concurrency: 1 } }), async (gw) => {
      const client = anthropicFor(gw);
      const created = await client.messages.batches.create({ requests: Array.from({ length: 10 }, (_, i) => request(i)) });
      await expect(client.messages.batches.delete(created.id)).rejects.toMatchObject({ status: 400 });
      await expect(client.messages.batches.results(created.id)).rejects.toThrow();
      const canceling = await client.messages.batches.cancel(created.id);
      expect(['canceling', 'ended']).toContain(canceling.processing_status);
      expect(canceling.cancel_initiated_at).not.toBeNull();
      const batch = await ended(client, created.id);
      const { succeeded, canceled } = batch.request_counts;
      expect(succeeded + canceled).toBe(10);
      expect(canceled).toBeGreaterThan(0);
      const lines = await results(client, batch.id);
      expect(lines.filter((l) => l.result.type === 'canceled')).toHaveLength(canceled);
      const listed = [];
      for await (const b of client.messages.batches.list({ limit: 1 })) listed.push(b.id);
      expect(listed).toEqual([batch.id]);
      expect(await client.messages.batches.delete(batch.id)).toEqual({ id: batch.id, type: 'message_batch_deleted' });
      await expect(client.messages.batches.retrieve(batch.id)).rejects.toMatchObject({ status: 404 });
      // Its lines no longer count against what the account may keep.
      const stored = redisKeys.storedBytes(gw.account);
      expect(await gw.redis.client.exists(stored.items, stored.sizes)).toBe(0);
    });
  });

  it('expires the requests its window leaves unrun, uncharged', async () => {
    const slow: Script = async (req, res) => {
      await sleep(300);
      greeting()(req, res);
    };
    await withGatewayOn([slow], oneModel({ batches: { concurrency: 1, completionWindowS: 1 } }), async (gw) => {
      const client = anthropicFor(gw);
      const batch = await ended(client, (await client.messages.batches.create({ requests: Array.from({ length: 8 }, (_, i) => request(i)) })).id);
      const { succeeded, expired } = batch.request_counts;
      expect(succeeded).toBeGreaterThan(0);
      expect(expired).toBe(8 - succeeded);
      const lines = await results(client, batch.id);
      expect(lines.filter((l) => l.result.type === 'expired')).toHaveLength(expired);
      let charged = 0;
      for await (const e of readUsageEvents(gw.redis.client, gw.account)) if (e.charged > 0) charged++;
      expect(charged).toBe(succeeded);
    });
  });

  it("refuses duplicate custom ids and models the key may not call, and keeps each account's batches its own", async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const client = anthropicFor(gw);
      await expect(client.messages.batches.create({ requests: [request(0), request(0)] })).rejects.toMatchObject({ status: 400, error: { type: 'error', error: { type: 'invalid_request_error' } } });
      await expect(client.messages.batches.create({ requests: [{ ...request(0), params: { ...request(0).params, model: 'other' } }] })).rejects.toMatchObject({ status: 400 });
      await expect(client.messages.batches.create({ requests: [{ custom_id: 'has space', params: request(0).params }] })).rejects.toMatchObject({ status: 400 });
      expect((await client.messages.batches.list()).data).toEqual([]);
      const mine = await ended(client, (await client.messages.batches.create({ requests: [request(0)] })).id);
      const other = anthropicFor(gw, (await makeAccount(gw.redis, 1)).key);
      await expect(other.messages.batches.retrieve(mine.id)).rejects.toMatchObject({ status: 404 });
      await expect(other.messages.batches.cancel(mine.id)).rejects.toMatchObject({ status: 404 });
      await expect(other.messages.batches.delete(mine.id)).rejects.toMatchObject({ status: 404 });
      const stolen = await fetch(`${gw.url}/v1/messages/batches/${mine.id}/results`, { headers: { 'x-api-key': (await makeAccount(gw.redis, 1)).key, 'anthropic-version': '2023-06-01' } });
      expect(stolen.status).toBe(404);
      expect((await stolen.json()).type).toBe('error');
      expect((await other.messages.batches.list()).data).toEqual([]);
    });
  });
});
