// A batch on the Redis topologies Parley runs on: every script of a batch
// touches keys of one account's slot only, so a 3-primary Cluster runs it as
// one server does, and so does a primary behind Sentinels.
import Anthropic from '@anthropic-ai/sdk';
import { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { greeting, until } from '../support/fake-upstream.js';
import { modelEntry, startGatewaysOn, startTestGateway, type TestGateway } from '../support/gateway.js';
import { startClusterAsTestRedis, startSentinelsAsTestRedis } from '../support/redis-topologies.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';

describe.each([
  { topology: 'a 3-primary Redis Cluster', start: startClusterAsTestRedis },
  { topology: 'a primary and a replica behind 3 sentinels', start: startSentinelsAsTestRedis },
])('batches on $topology', ({ start }) => {
  let upstream: FakeUpstream;
  let gw: TestGateway;
  beforeAll(async () => {
    startGatewaysOn(start);
    upstream = await startFakeUpstream(greeting());
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
  }, 60_000);
  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });

  it('runs, finishes, lists, reads back and deletes batches of both APIs', async () => {
    const lines = Array.from({ length: 20 }, (_, i) => JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: `q${i}` }] } }));
    const file = await gw.client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'in.jsonl'), purpose: 'batch' });
    let batch = await gw.client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await until(async () => (batch = await gw.client.batches.retrieve(batch.id)).status === 'completed', 15_000);
    expect(batch.request_counts).toEqual({ total: 20, completed: 20, failed: 0 });
    expect((await (await gw.client.files.content(batch.output_file_id!)).text()).trim().split('\n')).toHaveLength(20);
    expect((await gw.client.files.list()).data).toHaveLength(2);
    await gw.client.files.delete(batch.output_file_id!);

    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
    const created = await anthropic.messages.batches.create({ requests: [{ custom_id: 'a', params: { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] } }] });
    await until(async () => (await anthropic.messages.batches.retrieve(created.id)).processing_status === 'ended', 15_000);
    const results = [];
    for await (const r of await anthropic.messages.batches.results(created.id)) results.push(r.result.type);
    expect(results).toEqual(['succeeded']);
    expect(await anthropic.messages.batches.delete(created.id)).toMatchObject({ type: 'message_batch_deleted' });
  });
});
