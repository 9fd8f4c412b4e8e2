// One tenant's request bodies in flight on a replica are bounded: past
// `bodyBytesPerAccount` its next body is refused as its bytes arrive (429, in
// the API's error shape), while every other tenant is served, and the bytes
// come back as its requests end. A batch create counts the bytes of the
// stored file it reads as a body's, and a download the part it holds.
import { connect, type Socket } from 'node:net';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionBody, replyJson } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, startGatewayOn, type GatewayOnUpstreams, type TestGateway } from '../support/gateway.js';

const LIMIT = 64 * 1024;
let running: GatewayOnUpstreams;
let gw: TestGateway;

beforeAll(async () => {
  running = await startGatewayOn([(_req, res) => replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }))], ([url]) => ({
    gateway: { bodyBytesPerAccount: LIMIT },
    models: [modelEntry('m', [{ kind: 'vllm', url }])],
  }));
  ({ gw } = running);
});
afterAll(() => running.close());

/** A chat request whose body stops after `sent` of its declared `declared` bytes, its socket left open. */
function stalledBody(apiKey: string, sent: number, declared: number): Socket {
  const url = new URL(gw.url);
  const socket = connect(Number(url.port), url.hostname, () => {
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${apiKey}\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n`);
    socket.write(`{"model":"m","messages":[{"role":"user","content":"${'a'.repeat(sent - 45)}`);
  });
  socket.on('error', () => {});
  return socket;
}

const chat = (apiKey: string, model: string, bytes: number) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 1, messages: [{ role: 'user', content: 'a'.repeat(bytes) }] }),
  });

describe('request bodies in flight, per account', () => {
  it("refuse a tenant's body past its bytes in flight, serve the others, and give the bytes back as its requests end", async () => {
    const stalled = [stalledBody(gw.apiKey, 30_000, 40_000), stalledBody(gw.apiKey, 30_000, 40_000)];
    // A model that does not exist: 404 once the body is read whole, 429 where its bytes were refused first.
    await expect.poll(async () => (await chat(gw.apiKey, 'none', 10_000)).status, { timeout: 5000 }).toBe(429);
    const refused = await chat(gw.apiKey, 'm', 10_000);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(await refused.json()).toMatchObject({ error: { type: 'rate_limit_error', code: 'request_bodies_in_flight' } });
    const upload = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.apiKey, maxRetries: 0 }).files.create({ file: await toFile(Buffer.alloc(20_000, 'a'), 'x.jsonl'), purpose: 'batch' });
    await expect(upload).rejects.toMatchObject({ status: 429, error: { code: 'request_bodies_in_flight' } });

    const other = await makeAccount(gw.redis, 1);
    expect((await chat(other.key, 'm', 10_000)).status).toBe(200);

    for (const socket of stalled) socket.destroy();
    await expect.poll(async () => (await chat(gw.apiKey, 'm', 10_000)).status, { timeout: 5000 }).toBe(200);
    // Each request's bytes come back when it is answered: many after one another never add up.
    for (let i = 0; i < 10; i++) expect((await chat(gw.apiKey, 'm', 20_000)).status).toBe(200);
  });

  it("counts the stored file a batch create reads against the tenant's bytes in flight", async () => {
    const tenant = await makeAccount(gw.redis, 1);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: tenant.key, maxRetries: 0 });
    const line = (i: number) => JSON.stringify({ custom_id: `r${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'a'.repeat(900) }] } });
    const file = await client.files.create({ file: await toFile(Buffer.from(Array.from({ length: 40 }, (_, i) => line(i)).join('\n')), 'in.jsonl'), purpose: 'batch' });
    expect(file.bytes).toBeGreaterThan(36_000);
    const create = () => client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    // With 30,000 bytes of a body in flight, the file's 37,000 more would pass the 64 KiB: read anyway, as many
    // creates at once as the rate window lets through could each hold a 32 MiB file in memory.
    const stalled = stalledBody(tenant.key, 30_000, 40_000);
    await expect.poll(async () => (await chat(tenant.key, 'none', 36_000)).status, { timeout: 5000 }).toBe(429);
    await expect(create()).rejects.toMatchObject({ status: 429, error: { code: 'request_bodies_in_flight' } });
    expect((await client.batches.list()).data).toEqual([]);
    stalled.destroy();
    await expect.poll(async () => (await create().then(() => 200, (err) => err.status)), { timeout: 5000 }).toBe(200);
  });

  it("counts the part a download holds against the tenant's bytes in flight", async () => {
    const tenant = await makeAccount(gw.redis, 1);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: tenant.key, maxRetries: 0 });
    const content = Buffer.alloc(37_000, 'a');
    const file = await client.files.create({ file: await toFile(content, 'in.jsonl'), purpose: 'batch' });
    const download = () => fetch(`${gw.url}/v1/files/${file.id}/content`, { headers: { authorization: `Bearer ${tenant.key}` } });
    const stalled = stalledBody(tenant.key, 30_000, 40_000);
    await expect.poll(async () => (await chat(tenant.key, 'none', 36_000)).status, { timeout: 5000 }).toBe(429);
    const refused = await download();
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ error: { code: 'request_bodies_in_flight' } });
    stalled.destroy();
    await expect.poll(async () => (await download()).status, { timeout: 5000 }).toBe(200);
    expect(Buffer.from(await (await download()).arrayBuffer()).equals(content)).toBe(true);
  });
});
