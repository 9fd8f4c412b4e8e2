// POST /v1/embeddings through the same stages as chat: keys, the model's
// APIs, a hold bounded by the input, failover, exact settlement at the input
// price, with the real `openai` client.
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { replyJson, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, withGatewayOn } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';

/** A vLLM-style embeddings server: one 3-number vector per input, as floats or base64 as asked, 100 prompt tokens per input. */
const embedder: Script = (req, res) => {
  const inputs: unknown[] = typeof req.body.input === 'string' || typeof req.body.input[0] === 'number' ? [req.body.input] : req.body.input;
  const vector = (i: number) => [i, 0.5, -0.25];
  const data = inputs.map((_, i) => ({
    object: 'embedding', index: i,
    embedding: req.body.encoding_format === 'base64' ? Buffer.from(new Float32Array(vector(i)).buffer).toString('base64') : vector(i),
  }));
  replyJson(res, { id: 'embd-1', object: 'list', created: 1, model: req.body.model, data, usage: { prompt_tokens: 100 * inputs.length, total_tokens: 100 * inputs.length, completion_tokens: 0 } });
};
const failing: Script = (_req, res) => replyJson(res, { error: { message: 'boom' } }, 500);
const embeddingsModel = (urls: string[], extra: Record<string, unknown> = {}) => modelEntry('embed', urls.map((url) => ({ kind: 'vllm', url, upstreamModel: 'BAAI/bge-m3' })), { api: ['embeddings'], ...extra });
const post = (gw: { url: string; apiKey: string }, body: unknown) =>
  fetch(`${gw.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}` }, body: JSON.stringify(body) });

describe('POST /v1/embeddings', () => {
  it("answers the openai client's embeddings.create, whichever encoding it asks for, with the model id it asked for", async () => {
    await withGatewayOn([embedder], (urls) => ({ models: [embeddingsModel(urls)] }), async (gw, [up]) => {
      // The client asks for base64 and decodes it; asked for floats, it gets them as they are.
      const asBase64 = await gw.client.embeddings.create({ model: 'embed', input: ['first', 'second'] });
      expect(asBase64.data.map((d) => d.embedding)).toEqual([[0, 0.5, -0.25], [1, 0.5, -0.25]]);
      expect(asBase64).toMatchObject({ object: 'list', model: 'embed', usage: { prompt_tokens: 200, total_tokens: 200 } });
      const asFloats = await gw.client.embeddings.create({ model: 'embed', input: 'one', encoding_format: 'float', dimensions: 3, user: 'u-9' });
      expect(asFloats.data).toEqual([{ object: 'embedding', index: 0, embedding: [0, 0.5, -0.25] }]);
      expect(up.received.map((r) => r.body)).toEqual([
        { model: 'BAAI/bge-m3', input: ['first', 'second'], encoding_format: 'base64' },
        { model: 'BAAI/bge-m3', input: 'one', encoding_format: 'float', dimensions: 3, user: 'u-9' },
      ]);
    });
  });

  it("passes the vectors on as they came, under the client's model id, and converts them where the upstream ignored the encoding asked for", async () => {
    // As some servers do: floats whatever encoding_format says, and OpenAI's own order of fields.
    const floatsOnly: Script = (req, res) =>
      replyJson(res, { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.25, -1, 3] }], model: req.body.model, usage: { prompt_tokens: 7, total_tokens: 7 } });
    await withGatewayOn([embedder, floatsOnly], (urls) => ({ models: [embeddingsModel([urls[0]]), modelEntry('floats', [{ kind: 'vllm', url: urls[1], upstreamModel: 'upstream-floats' }], { api: ['embeddings'] })] }), async (gw) => {
      const inPlace = await (await post(gw, { model: 'embed', input: ['a', 'b'], encoding_format: 'base64' })).text();
      expect(inPlace).not.toContain('BAAI');
      expect(JSON.parse(inPlace)).toEqual({
        object: 'list', model: 'embed', usage: { prompt_tokens: 200, total_tokens: 200 },
        data: [0, 1].map((i) => ({ object: 'embedding', index: i, embedding: Buffer.from(new Float32Array([i, 0.5, -0.25]).buffer).toString('base64') })),
      });
      const converted = await (await post(gw, { model: 'floats', input: 'a', encoding_format: 'base64' })).json();
      expect(converted).toMatchObject({ model: 'floats', usage: { prompt_tokens: 7 } });
      const bytes = Buffer.from(converted.data[0].embedding, 'base64');
      expect([0, 4, 8].map((at) => bytes.readFloatLE(at))).toEqual([0.25, -1, 3]);
      const asFloats = await (await post(gw, { model: 'floats', input: 'a' })).json();
      expect(asFloats).toEqual({ object: 'list', model: 'floats', data: [{ object: 'embedding', index: 0, embedding: [0.25, -1, 3] }], usage: { prompt_tokens: 7, total_tokens: 7 } });
    });
  });

  it('charges the tokens the upstream counted at the input price, exactly', async () => {
    await withGatewayOn([embedder], (urls) => ({ models: [embeddingsModel(urls, { pricesPerMillion: { inputCacheMiss: 0.27, inputCacheHit: 0.07, output: 5 } })] }), async (gw) => {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      await gw.client.embeddings.create({ model: 'embed', input: [[1, 2, 3], [4, 5]] });
      // 200 tokens × 0.27 per million = 54 micro-units.
      await expect.poll(async () => (await readBalance(gw.redis.client, gw.account))!.granted).toBe(before.granted - 54);
      expect((await readBalance(gw.redis.client, gw.account))!.held).toBe(0);
      expect((await usageEventsOf(gw.redis.client, gw.account)).at(-1)).toMatchObject({ api: 'embeddings', promptTokens: 200, completionTokens: 0, charged: 54 });
    });
  });

  it('holds what the input can cost before any upstream call: 402 with nothing sent for a balance it overruns', async () => {
    await withGatewayOn([embedder], (urls) => ({ models: [embeddingsModel(urls, { pricesPerMillion: { inputCacheMiss: 1000, inputCacheHit: 1, output: 1 } })] }), async (gw, [up]) => {
      const poor = await makeAccount(gw.redis, 0.001);
      const res = await post({ url: gw.url, apiKey: poor.key }, { model: 'embed', input: 'x'.repeat(5_000) });
      expect(res.status).toBe(402);
      expect((await res.json()).error.code).toBe('insufficient_balance');
      expect(up.received).toHaveLength(0);
    });
  });

  it('fails over to the next endpoint before the first byte', async () => {
    await withGatewayOn([failing, embedder], (urls) => ({ gateway: { health: { probe: { intervalMs: 0 } } }, models: [embeddingsModel(urls, { routing: { policy: 'round-robin' } })] }), async (gw) => {
      for (let i = 0; i < 2; i++) expect((await gw.client.embeddings.create({ model: 'embed', input: 'again' })).data).toHaveLength(1);
    });
  });

  it("refuses an API the model does not serve with OpenAI's error, before any upstream call and charge", async () => {
    await withGatewayOn([embedder], (urls) => ({ models: [modelEntry('chat-only', urls.map((url) => ({ kind: 'vllm', url }))), embeddingsModel(urls)] }), async (gw, [up]) => {
      const before = await readBalance(gw.redis.client, gw.account);
      const toChatModel = await post(gw, { model: 'chat-only', input: 'x' });
      expect(toChatModel.status).toBe(400);
      expect((await toChatModel.json()).error).toMatchObject({ type: 'invalid_request_error', code: 'model_not_supported', param: 'model' });
      const toEmbeddingsModel = await postChat(gw, { model: 'embed', messages: [{ role: 'user', content: 'hi' }] });
      expect(toEmbeddingsModel.status).toBe(400);
      expect((await toEmbeddingsModel.json()).error.message).toContain('/v1/embeddings');
      expect(up.received).toHaveLength(0);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
      const listed = await (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.apiKey}` } })).json();
      expect(listed.data.map((m: { id: string; api: string[] }) => [m.id, m.api])).toEqual([['chat-only', ['chat']], ['embed', ['embeddings']]]);
    });
  });

  it.each([
    ['no input', { model: 'embed' }, 'input'],
    ['an empty list', { model: 'embed', input: [] }, 'input'],
    ['an unknown encoding', { model: 'embed', input: 'x', encoding_format: 'hex' }, 'encoding_format'],
    ['text that is not valid Unicode', { model: 'embed', input: ['ok', 'a\ud800'] }, 'input[1]'],
  ])('refuses %s with a 400 naming the field', async (_name, body, param) => {
    await withGatewayOn([embedder], (urls) => ({ models: [embeddingsModel(urls)] }), async (gw, [up]) => {
      const res = await post(gw, body);
      expect(res.status).toBe(400);
      expect((await res.json()).error.param).toBe(param);
      expect(up.received).toHaveLength(0);
    });
  });
});
