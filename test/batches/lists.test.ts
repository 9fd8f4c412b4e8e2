// An account's files and batches listed as the APIs list them, at a cost that
// does not grow with what else the account keeps: a list of files of one
// purpose reads that purpose's files alone (files stored before purposes were
// listed apart are sorted once); a list answers at most a thousand files or a
// hundred batches, saying it has more, which the clients' pages follow.
import Anthropic from '@anthropic-ai/sdk';
import { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { BATCHES_PER_LIST, createFailedBatch } from '../../src/batches/batch-store.js';
import { FILES_PER_LIST } from '../../src/batches/file-store.js';
import { redisKeys } from '../../src/redis/keys.js';
import { greeting } from '../support/fake-upstream.js';
import { modelEntry, withGatewayOn } from '../support/gateway.js';

const OUTPUTS = 2_500;

describe("an account's files and batches, listed", () => {
  it('of one purpose, read from that purpose alone; all of them a thousand at a time', async () => {
    await withGatewayOn([greeting()], ([url]) => ({ gateway: { batches: { concurrency: 0 } }, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const uploads = [];
      for (let i = 0; i < 2; i++) uploads.push((await gw.client.files.create({ file: await toFile(Buffer.from('{}\n'), `in-${i}.jsonl`), purpose: 'batch' })).id);
      // Batch outputs as an earlier Parley stored them: in the list of all files only.
      const now = Date.now();
      const legacy = gw.redis.client.pipeline();
      for (let i = 0; i < OUTPUTS; i++) {
        const id = `file-legacy${i}`;
        legacy.hset(redisKeys.file(gw.account, id).meta, { filename: 'out.jsonl', purpose: 'batch_output', batch: `batch_${i}`, part: 'output', bytes: 10, created_at: now - OUTPUTS + i, expires_at: now + 3_600_000 });
        legacy.zadd(redisKeys.accountFiles(gw.account), now - OUTPUTS + i, id);
      }
      await legacy.exec();
      const metaReads = async () => Number(/^cmdstat_hgetall:calls=(\d+)/m.exec(await gw.redis.client.info('commandstats'))?.[1] ?? 0);

      // The first list by purpose sorts the earlier files once; from then on, a list of uploads reads the uploads.
      expect((await gw.client.files.list({ purpose: 'batch' })).data.map((f) => f.id).sort()).toEqual([...uploads].sort());
      const before = await metaReads();
      expect((await gw.client.files.list({ purpose: 'batch' })).data.map((f) => f.id).sort()).toEqual([...uploads].sort());
      // Two uploads' hashes (and at most a few more reads of the request's own): not the 2,500 outputs'.
      expect((await metaReads()) - before).toBeLessThan(10);
      expect((await gw.client.files.list({ purpose: 'fine-tune' })).data).toEqual([]);

      // A thousand a list, however many are asked for; the client's pages go on to the last.
      const first = await gw.client.files.list({ limit: 10_000 });
      expect(first.data).toHaveLength(FILES_PER_LIST);
      expect(first.has_more).toBe(true);
      const outputs = [];
      for await (const f of gw.client.files.list({ purpose: 'batch_output' })) outputs.push(f.id);
      expect(new Set(outputs).size).toBe(OUTPUTS);
      const all = [];
      for await (const f of gw.client.files.list()) all.push(f.id);
      expect(all).toHaveLength(OUTPUTS + 2);

      // A deleted upload leaves both lists.
      await gw.client.files.delete(uploads[0]);
      expect((await gw.client.files.list({ purpose: 'batch' })).data.map((f) => f.id)).toEqual([uploads[1]]);
      expect((await gw.client.files.list({ limit: 3 })).data.map((f) => f.id)).not.toContain(uploads[0]);
    });
  });

  it('a hundred batches at a time, however many are asked for', async () => {
    await withGatewayOn([greeting()], ([url]) => ({ gateway: { batches: { concurrency: 0 } }, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const made = 150;
      for (let i = 0; i < made; i++) {
        const batch = { id: `msgbatch_listed${i}`, api: 'anthropic' as const, account: gw.account, keyId: 'key_1', endpoint: '/v1/messages', inputFileId: null, metadata: null, model: 'm', windowMs: 86_400_000 };
        await createFailedBatch(gw.redis.client, batch, [], 3_600_000);
      }
      const client = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      const first = await client.messages.batches.list({ limit: 1000 });
      expect(first.data).toHaveLength(BATCHES_PER_LIST);
      expect(first.has_more).toBe(true);
      const listed = [];
      for await (const b of client.messages.batches.list({ limit: 1000 })) listed.push(b.id);
      expect(new Set(listed).size).toBe(made);
    });
  });
});
