// Many teams share the batch runners: each account takes its turn however
// many batches it has, and no account may keep more than its share of files
// or of running batches.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { MAX_ACTIVE_BATCHES } from '../../src/batches/batch-intake.js';
import { greeting, sleep, until, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, withGatewayOn } from '../support/gateway.js';

const config = (batches: Record<string, unknown>, script = 'm') => ([url]: string[]) => ({ gateway: { batches }, models: [modelEntry(script, [{ kind: 'vllm', url }])] });
const requests = (n: number) => Array.from({ length: n }, (_, i) => ({ custom_id: `r${i}`, params: { model: 'm', max_tokens: 4, messages: [{ role: 'user' as const, content: `q${i}` }] } }));

describe('batches of many teams', () => {
  it('take turns by account: a team with three batches gets no more of the runner than a team with one', async () => {
    const slow: Script = async (req, res) => {
      await sleep(40);
      greeting()(req, res);
    };
    await withGatewayOn([slow], config({ concurrency: 1 }), async (gw) => {
      const many = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      const one = new Anthropic({ baseURL: gw.url, apiKey: (await makeAccount(gw.redis, 1)).key, maxRetries: 0 });
      const theirs = [];
      for (let i = 0; i < 3; i++) theirs.push((await many.messages.batches.create({ requests: requests(10) })).id);
      const mine = (await one.messages.batches.create({ requests: requests(10) })).id;
      await until(async () => (await one.messages.batches.retrieve(mine)).processing_status === 'ended', 20_000);
      let theirsDone = 0;
      for (const id of theirs) theirsDone += (await many.messages.batches.retrieve(id)).request_counts.succeeded;
      // Turn by turn, the other team ran about as many lines; by batch, it would have run three times as many.
      expect(theirsDone).toBeLessThanOrEqual(15);
    });
  });

  it('refuses an upload past what the account may keep, and a batch past the most it may have running', async () => {
    await withGatewayOn([greeting()], config({ concurrency: 0, storedBytesPerAccount: 4096 }), async (gw) => {
      const line = JSON.stringify({ custom_id: 'x', method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'a'.repeat(1500) }] } });
      const upload = () => toFile(Buffer.from(line), 'x.jsonl').then((file) => gw.client.files.create({ file, purpose: 'batch' }));
      const first = await upload();
      await upload();
      await expect(upload()).rejects.toMatchObject({ status: 400, error: { code: 'storage_limit_reached' } });
      await gw.client.files.delete(first.id);
      await upload();

      const client = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      for (let i = 0; i < MAX_ACTIVE_BATCHES; i++) await client.messages.batches.create({ requests: requests(1) });
      await expect(client.messages.batches.create({ requests: requests(1) })).rejects.toMatchObject({ status: 429 });
      // Another team is not held back by this one's batches.
      const other = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: (await makeAccount(gw.redis, 1)).key, maxRetries: 0 });
      const file = await other.files.create({ file: await toFile(Buffer.from(line), 'y.jsonl'), purpose: 'batch' });
      expect((await other.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' })).status).toBe('in_progress');
    });
  });
});
