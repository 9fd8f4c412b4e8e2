// Many teams share the batch runners: each account takes its turn however
// many batches it has, and no account may keep more than its share of Redis
// (its files and its batches' lines) or of running batches. And the more
// batches the teams keep running, the more a reading of them costs Redis: it
// is read for /metrics when scraped, not by every replica on a timer, and the
// runners read it a page at a time.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { MAX_ACTIVE_BATCHES } from '../../src/batches/batch-store.js';
import { STORED_ITEM_OVERHEAD_BYTES } from '../../src/batches/stored-bytes.js';
import { redisKeys } from '../../src/redis/keys.js';
import { greeting, sleep, until, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, withGatewayOn } from '../support/gateway.js';

const config = (batches: Record<string, unknown>, script = 'm') => ([url]: string[]) => ({ gateway: { batches }, models: [modelEntry(script, [{ kind: 'vllm', url }])] });
/** A chat line of a batch file, about 1.6 KB. */
const chatLine = (id: string) => JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'a'.repeat(1500) }] } });
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

  it('refuses a batch past the most an account may have running, and another team is not held back', async () => {
    await withGatewayOn([greeting()], config({ concurrency: 0 }), async (gw) => {
      const client = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      for (let i = 0; i < MAX_ACTIVE_BATCHES - 10; i++) await client.messages.batches.create({ requests: requests(1) });
      // Thirty at once, with room for ten: each is counted with the others, so together they cannot pass the most.
      const burst = await Promise.allSettled(Array.from({ length: 30 }, () => client.messages.batches.create({ requests: requests(1) })));
      for (const b of burst) if (b.status === 'rejected') expect(b.reason).toMatchObject({ status: 429 });
      const running = async () => {
        let n = 0;
        for await (const b of client.messages.batches.list({ limit: 100 })) n += b.processing_status === 'in_progress' ? 1 : 0;
        return n;
      };
      expect(await running()).toBeLessThanOrEqual(MAX_ACTIVE_BATCHES);
      while ((await running()) < MAX_ACTIVE_BATCHES) await client.messages.batches.create({ requests: requests(1) });
      await expect(client.messages.batches.create({ requests: requests(1) })).rejects.toMatchObject({ status: 429 });
      const other = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: (await makeAccount(gw.redis, 1)).key, maxRetries: 0 });
      const file = await other.files.create({ file: await toFile(Buffer.from(chatLine('y')), 'y.jsonl'), purpose: 'batch' });
      expect((await other.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' })).status).toBe('in_progress');
    });
  });

  // Each upload is a request within the rate limit: tiny ones, counted by their bytes alone, would each keep in Redis
  // what the cap never saw (a file's metadata and its places in the account's lists).
  it('counts what Redis keeps of each item beside its bytes: tiny uploads stop where the cap holds their keeping', async () => {
    const line = JSON.stringify({ custom_id: 't', method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'x' }] } });
    await withGatewayOn([greeting()], config({ concurrency: 0, storedBytesPerAccount: 3 * STORED_ITEM_OVERHEAD_BYTES }), async (gw) => {
      const statuses: string[] = [];
      for (let i = 0; i < 5; i++) {
        const made = await toFile(Buffer.from(line), 'x.jsonl').then((file) => gw.client.files.create({ file, purpose: 'batch' })).then(() => 'kept', (err) => err.error?.code);
        statuses.push(made);
      }
      expect(statuses).toEqual(['kept', 'kept', 'storage_limit_reached', 'storage_limit_reached', 'storage_limit_reached']);
      expect((await gw.client.files.list()).data).toHaveLength(2);
    });
  });

  it('counts every upload and every batch\'s lines against what the account may keep, however many arrive at once', async () => {
    const line = chatLine('x');
    const size = Buffer.byteLength(line);
    await withGatewayOn([greeting()], config({ concurrency: 0, storedBytesPerAccount: Math.floor(4.5 * (size + STORED_ITEM_OVERHEAD_BYTES)) }), async (gw) => {
      const upload = () => toFile(Buffer.from(line), 'x.jsonl').then((file) => gw.client.files.create({ file, purpose: 'batch' }));
      const refused = { status: 400, error: { code: 'storage_limit_reached' } };
      // Twelve at once: each was checked against what was listed before any was stored, and all twelve were kept.
      const uploads = await Promise.allSettled(Array.from({ length: 12 }, upload));
      const kept = uploads.flatMap((u) => (u.status === 'fulfilled' ? [u.value] : []));
      expect(kept).toHaveLength(4);
      for (const u of uploads) if (u.status === 'rejected') expect(u.reason).toMatchObject(refused);
      expect((await gw.client.files.list()).data.map((f) => f.id).sort()).toEqual(kept.map((f) => f.id).sort());

      // A batch keeps its lines beside its file: each batch made from one file counts again.
      const batchOf = (fileId: string) => gw.client.batches.create({ input_file_id: fileId, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await expect(batchOf(kept[0].id)).rejects.toMatchObject(refused);
      expect((await gw.client.batches.list()).data).toEqual([]);
      await gw.client.files.delete(kept[1].id);
      await gw.client.files.delete(kept[2].id);
      expect((await batchOf(kept[0].id)).status).toBe('in_progress');
      expect((await batchOf(kept[0].id)).status).toBe('in_progress');
      await expect(batchOf(kept[0].id)).rejects.toMatchObject(refused);
      expect((await gw.client.batches.list()).data).toHaveLength(2);

      // Anthropic's batches too, refused in Anthropic's error shape.
      const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      const big = [{ custom_id: 'big', params: { model: 'm', max_tokens: 4, messages: [{ role: 'user' as const, content: 'a'.repeat(size) }] } }];
      await expect(anthropic.messages.batches.create({ requests: big })).rejects.toMatchObject({ status: 400, error: { type: 'error', error: { type: 'invalid_request_error' } } });
      await gw.client.files.delete(kept[3].id);
      expect((await anthropic.messages.batches.create({ requests: big })).processing_status).toBe('in_progress');

      // Another team keeps its own.
      const other = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: (await makeAccount(gw.redis, 1)).key, maxRetries: 0 });
      expect((await other.files.create({ file: await toFile(Buffer.from(line), 'y.jsonl'), purpose: 'batch' })).bytes).toBe(size);
    });
  });

  it("are read by each replica's runner a page at a time, however many the fleet runs, and one made here runs at once", async () => {
    await withGatewayOn([greeting()], config({ concurrency: 2 }), async (gw) => {
      // 20,000 batches of another team queued just now (and not stored yet, so kept and passed over): read whole, about 1 MB.
      const now = Date.now();
      for (let i = 0; i < 20_000; i += 2_000) {
        await gw.redis.client.zadd(redisKeys.activeBatches, ...Array.from({ length: 2_000 }, (_, j) => [now, `acct_crowd batch_${i + j}`]).flat());
      }
      const bytesSent = async () => Number(/^total_net_output_bytes:(\d+)/m.exec(await gw.redis.client.info('stats'))![1]);
      const before = await bytesSent();
      const started = Date.now();
      const client = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      const { id } = await client.messages.batches.create({ requests: requests(4) });
      await until(async () => (await client.messages.batches.retrieve(id)).processing_status === 'ended', 10_000);
      expect((await client.messages.batches.retrieve(id)).request_counts.succeeded).toBe(4);
      await sleep(Math.max(0, 3_000 - (Date.now() - started)));
      // In three seconds, three pages of a thousand or four; read whole, the set would have gone out three times.
      expect((await bytesSent()) - before).toBeLessThan(600_000);
    });
  });

  it('with nothing left to claim are left a second before this replica asks again, however many accounts have one', async () => {
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let waiting = 0;
    const holding: Script = async (req, res) => {
      waiting++;
      await held;
      greeting()(req, res);
    };
    await withGatewayOn([holding], config({ concurrency: 8 }), async (gw) => {
      const teams = [gw.apiKey, ...(await Promise.all([1, 2, 3, 4].map(async () => (await makeAccount(gw.redis, 1)).key)))];
      const clients = teams.map((apiKey) => new Anthropic({ baseURL: gw.url, apiKey, maxRetries: 0 }));
      const made = await Promise.all(clients.map((client) => client.messages.batches.create({ requests: requests(1) })));
      // Each batch's one line is in flight, its queue empty; the replica still has room, and polls four times a second.
      await until(async () => waiting === 5, 5_000);
      const claims = async () => Number(/^cmdstat_lpop:calls=(\d+)/m.exec(await gw.redis.client.info('commandstats'))?.[1] ?? 0);
      const before = await claims();
      await sleep(2_000);
      // Asked at each poll, the five empty queues were claimed from 40 times in these 2 s; left a second each, about 10.
      expect((await claims()) - before).toBeLessThanOrEqual(15);
      release();
      for (const [i, client] of clients.entries()) await until(async () => (await client.messages.batches.retrieve(made[i].id)).processing_status === 'ended', 10_000);
    });
  });

  it("are read for /metrics when it is scraped, and no more often: a replica nobody scrapes costs Redis nothing for them", async () => {
    await withGatewayOn([greeting()], config({ concurrency: 0 }), async (gw) => {
      const client = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      for (let i = 0; i < 3; i++) await client.messages.batches.create({ requests: requests(2) });
      // Each batch's reading is a transaction with its queue's LLEN (no other command here sends one).
      const batchReads = async () => Number(/^cmdstat_llen:calls=(\d+)/m.exec(await gw.redis.client.info('commandstats'))?.[1] ?? 0);
      const before = await batchReads();
      await sleep(4_500);
      expect(await batchReads()).toBe(before);
      const scrape = () => fetch(`${gw.url}/metrics`).then((r) => r.text());
      const [first, second] = await Promise.all([scrape(), scrape()]);
      for (const text of [first, second]) {
        expect(text).toMatch(/^parley_batches_active(\{[^}]*\})? 3$/m);
        expect(text).toMatch(/^parley_batch_lines\{state="queued"[^}]*\} 6$/m);
      }
      // Two scrapes at once share one reading: a read of each of the three batches.
      expect((await batchReads()) - before).toBe(3);
    });
  });
});
