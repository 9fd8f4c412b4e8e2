// A large batch's input is joined and parsed on the intake thread, not the
// main one (every other tenant's requests on the replica): Anthropic's create
// body of 32 MiB took 1.0 to 1.3 s to parse. What the main thread does with it, its
// lines written to Redis, goes a part at a time (a thousand lines or about a
// MiB a command), so that a file of 1,000 lines of 32 KB is no one stall.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_BATCH_LINES } from '../../src/batches/batch-intake.js';
import { createBatch } from '../../src/batches/batch-store.js';
import { createFile } from '../../src/batches/file-store.js';
import { readBatchInput } from '../../src/batches/input-reading.js';
import { redisKeys } from '../../src/redis/keys.js';
import { greeting } from '../support/fake-upstream.js';
import { modelEntry, withGatewayOn } from '../support/gateway.js';
import { longestCollection, longestStall } from '../support/event-loop.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

/** A file of 1,000 lines of 32 KB, 32 MB in all. */
const fileOf32KbLines = () => Buffer.from(Array.from({ length: 1_000 }, (_, i) => JSON.stringify({ custom_id: `r${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: `${i} `.padEnd(32_000, 'x') }] } })).join('\n'));

describe('a batch of 1,000 lines of 32 KB', () => {
  it('is stored without holding the main thread more than a few ms at once', async () => {
    const file = fileOf32KbLines();
    // Read as the intake thread reads it, before the stall is measured: only the store runs on the main thread.
    const read = readBatchInput({ kind: 'openai', endpoint: '/v1/chat/completions', content: [file] });
    if (!('lines' in read)) throw read;
    expect(read.problems).toEqual([]);
    const stall = await longestStall('1,000 lines of 32 KB stored', async (round) => {
      const id = `batch_large${round}`;
      await createBatch(redis.client, { id, api: 'openai', account: 'acct_large', keyId: 'key_1', endpoint: '/v1/chat/completions', inputFileId: null, metadata: null, model: 'm', windowMs: 86_400_000, stored: read }, { ms: 60_000, capBytes: 2 ** 30 });
      expect(await redis.client.hlen(redisKeys.batch('acct_large', id).lines)).toBe(1_000);
    }, 60);
    expect(stall).toBeLessThan(60);
  });
});

/** POSTs `body` as it is, its status and text. */
function postBuffer(url: string, headers: Record<string, string | number>, body: Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const sent = request(url, { method: 'POST', headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode!, text: Buffer.concat(chunks).toString('utf8') }));
    });
    sent.on('error', reject);
    sent.end(body);
  });
}

describe("an Anthropic create of 32 MiB of small requests", () => {
  it('is parsed off the main thread, and refused for its count', async () => {
    // Encoded before it is timed, its objects let go: the client runs in this process too, and writes the bytes to
    // its socket as they are (fetch copies a body twice on the caller's thread: 60 to 250 ms of 32 MiB here).
    const body = Buffer.from(JSON.stringify({ requests: Array.from({ length: 690_000 }, (_, i) => ({ custom_id: `r${i}`, params: { model: 'm' } })) }));
    expect(body.length).toBeGreaterThan(30 * 2 ** 20);
    await withGatewayOn([greeting()], ([url]) => ({ gateway: { batches: { concurrency: 0 } }, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const headers = { 'x-api-key': gw.apiKey, 'anthropic-version': '2023-06-01', 'content-type': 'application/json', 'content-length': body.length };
      const stall = await longestStall('a create of 32 MiB parsed and refused', async () => {
        const answer = await postBuffer(`${gw.url}/v1/messages/batches`, headers, body);
        expect(answer.status).toBe(400);
        expect(JSON.parse(answer.text)).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining(`at most ${MAX_BATCH_LINES} requests`) } });
      }, 80);
      // Parsed on the main thread, the body held it 1.0 to 1.3 s; joined there in one copy, 100 to 130 ms (14 to 35
      // ms handed over as it came). What is left is its bytes' reading, a chunk at a time.
      expect(stall).toBeLessThan(80);
    });
  });
});

describe('an OpenAI create of a stored file of 1,000 lines of 32 KB', () => {
  it("has its lines brought back from the intake thread as bytes, which the main thread's collector need not copy", async () => {
    const file = fileOf32KbLines();
    await withGatewayOn([greeting()], ([url]) => ({ gateway: { batches: { concurrency: 0 } }, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      // Stored before it is timed, for each round.
      for (const round of [1, 2, 3]) await createFile(gw.redis.client, gw.account, { id: `file-large${round}`, filename: 'large.jsonl', purpose: 'batch', content: [file] }, { ms: 60_000, capBytes: 2 ** 30 });
      const create = async (round: number) => {
        const id = `file-large${round}`;
        const answer = await fetch(`${gw.url}/v1/batches`, { method: 'POST', headers: { authorization: `Bearer ${gw.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ input_file_id: id, endpoint: '/v1/chat/completions', completion_window: '24h' }) });
        expect(answer.status).toBe(200);
        expect(await answer.json()).toMatchObject({ object: 'batch', input_file_id: id, request_counts: { total: 1_000 } });
      };
      // Its parts joined on the main thread held it 100 to 150 ms. Its lines brought back as strings, 32 MB of them,
      // were copied by the main thread's young-generation collections: pauses of 50 to 95 ms, where the bytes of
      // one buffer make them 3 to 15 (a pause is the collector's own time, which other test files running beside
      // this one lengthen less than they do a stall of the loop).
      expect(await longestCollection('a create of a stored file of 32 MB', create, 30)).toBeLessThan(30);
    });
  });
});

describe('an upload of a file of 32 MB', () => {
  const boundary = '0f3c9a8e2b1d4c5fa7e6d5c4b3a29180';
  const form = (name: string, headers: string) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"${headers}\r\n\r\n`;
  const uploadOf = (file: Buffer) => Buffer.concat([Buffer.from(`${form('purpose', '')}batch\r\n${form('file', '; filename="large.jsonl"\r\nContent-Type: application/jsonl')}`), file, Buffer.from(`\r\n--${boundary}--\r\n`)]);
  const multipart = { 'content-type': `multipart/form-data; boundary=${boundary}` };

  it('is read where its chunks lie, not joined on the main thread', async () => {
    const file = fileOf32KbLines();
    const body = uploadOf(file);
    await withGatewayOn([greeting()], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const headers = { authorization: `Bearer ${gw.apiKey}`, ...multipart, 'content-length': body.length };
      const stored: string[] = [];
      const stall = await longestStall('an upload of 32 MB', async () => {
        const answer = await postBuffer(`${gw.url}/v1/files`, headers, body);
        expect(answer.status).toBe(200);
        expect(JSON.parse(answer.text)).toMatchObject({ object: 'file', bytes: file.length, purpose: 'batch' });
        stored.push(JSON.parse(answer.text).id);
      }, 80);
      // Joined on the main thread, it held it 100 to 130 ms.
      expect(stall).toBeLessThan(80);
      // Stored byte for byte (read after the timing: a reply of 32 MB is joined by the Redis client, in this process).
      for (const id of stored) expect((await gw.redis.client.getBuffer(redisKeys.file(gw.account, id).content))!.equals(file)).toBe(true);
    });
  });

  it(`of newlines only is refused for its lines, counted no further than ${MAX_BATCH_LINES}`, async () => {
    const body = uploadOf(Buffer.alloc(32_000_000, '\n'));
    await withGatewayOn([greeting()], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const headers = { authorization: `Bearer ${gw.apiKey}`, ...multipart, 'content-length': body.length };
      const stall = await longestStall('an upload of 32 MB of newlines', async () => {
        const answer = await postBuffer(`${gw.url}/v1/files`, headers, body);
        expect(answer.status).toBe(400);
        expect(JSON.parse(answer.text).error).toMatchObject({ param: 'file', message: expect.stringContaining(`at most ${MAX_BATCH_LINES} lines`) });
      }, 80);
      // Its 32 million lines counted whole held the main thread 350 ms.
      expect(stall).toBeLessThan(80);
      expect(await gw.redis.client.keys('*file*')).toEqual([]);
    });
  });
});

describe('a batch input dense with objects', () => {
  it('is refused before it is parsed, an Anthropic create and an OpenAI file alike', async () => {
    // 32 MiB of `{},`: 11 million objects, which took the intake thread 7 s and the process 1 GB to parse.
    const objects = Array(11_000_000).fill('{}').join(',');
    const started = performance.now();
    expect(readBatchInput({ kind: 'anthropic', content: [Buffer.from(`{"requests":[${objects}]}`)], maxLines: MAX_BATCH_LINES })).toMatchObject({ status: 400, code: 'body_too_dense' });
    expect(readBatchInput({ kind: 'openai', endpoint: '/v1/chat/completions', content: [Buffer.from(`[${objects}]`)] })).toMatchObject({ status: 400, code: 'body_too_dense' });
    // Counted, the objects are refused within the first part of the bytes.
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});
