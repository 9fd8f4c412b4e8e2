// POST /v1/completions through the same stages as chat, with the real
// `openai` client: whole and streamed under chat's contract (keep-alives, the
// usage chunk only when asked for, [DONE], the error event unpaid), the
// legacy fields sent on, `n` fanned out where a server answers one choice.
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { replyJson, sleep, until, type Script } from '../support/fake-upstream.js';
import { modelEntry, withGatewayOn, type TestGateway } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';

const usage = { prompt_tokens: 10, completion_tokens: 4, total_tokens: 14, prompt_tokens_details: { cached_tokens: 6 } };
const textChunk = (text: string, finish: string | null = null, index = 0) =>
  `data: ${JSON.stringify({ id: 'cmpl-up', object: 'text_completion', created: 1, model: 'up', choices: [{ index, text, logprobs: null, finish_reason: finish, stop_reason: null }], usage: null })}\n\n`;

/** A vLLM-style completions server: `n` choices of "def f():" in two pieces. */
const completer: Script = (req, res) => {
  const n = req.body.n ?? 1;
  if (req.body.stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < n; i++) res.write(textChunk('def', null, i) + textChunk(' f():', null, i) + textChunk('', 'length', i));
    res.end(`data: ${JSON.stringify({ id: 'cmpl-up', object: 'text_completion', created: 1, model: 'up', choices: [], usage })}\n\ndata: [DONE]\n\n`);
    return;
  }
  replyJson(res, { id: 'cmpl-up', object: 'text_completion', created: 1, model: 'up', choices: Array.from({ length: n }, (_, index) => ({ index, text: 'def f():', logprobs: null, finish_reason: 'length' })), usage });
};
const model = (urls: string[], kind = 'vllm') => modelEntry('coder', urls.map((url) => ({ kind, url, upstreamModel: 'Qwen/Qwen2.5-Coder-7B' })), { api: ['completions'] });
const post = (gw: TestGateway, body: unknown) =>
  fetch(`${gw.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}` }, body: JSON.stringify(body) });

describe('POST /v1/completions', () => {
  it("answers the openai client's completions.create whole, with the legacy fields sent on and the model id asked for", async () => {
    await withGatewayOn([completer], (urls) => ({ models: [model(urls)] }), async (gw, [up]) => {
      const reply = await gw.client.completions.create({ model: 'coder', prompt: 'def', suffix: '\n    return 1', echo: false, logprobs: 2, stop: ['\n\n'], max_tokens: 4, temperature: 0.2, user: 'dev-3' });
      expect(reply).toMatchObject({ object: 'text_completion', model: 'coder', choices: [{ index: 0, text: 'def f():', finish_reason: 'length', logprobs: null }], usage: { prompt_tokens: 10, completion_tokens: 4, total_tokens: 14, prompt_tokens_details: { cached_tokens: 6 } } });
      expect(reply.id).toMatch(/^cmpl-/);
      expect(up.received[0].path).toBe('/v1/completions');
      expect(up.received[0].body).toEqual({ model: 'Qwen/Qwen2.5-Coder-7B', prompt: 'def', suffix: '\n    return 1', echo: false, logprobs: 2, stop: ['\n\n'], max_tokens: 4, temperature: 0.2, user: 'dev-3', cache_salt: expect.any(String) });
    });
  });

  it('streams text_completion chunks, the usage chunk only when asked for, then [DONE], and charges the reply', async () => {
    await withGatewayOn([completer], (urls) => ({ models: [model(urls)] }), async (gw) => {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      const stream = await gw.client.completions.create({ model: 'coder', prompt: 'def', stream: true, stream_options: { include_usage: true } });
      const chunks = [];
      for await (const c of stream) chunks.push(c);
      expect(chunks.map((c) => c.choices.map((ch) => [ch.text, ch.finish_reason]))).toEqual([[['def', null]], [[' f():', null]], [['', 'length']], []]);
      expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 10, completion_tokens: 4, total_tokens: 14, prompt_tokens_details: { cached_tokens: 6 } });
      expect(chunks.every((c) => c.object === 'text_completion' && c.model === 'coder')).toBe(true);
      // 4 uncached × 1 + 6 cached × 0.1 + 4 completion × 2 micro-units, rounded up once.
      await until(async () => (await readBalance(gw.redis.client, gw.account))!.granted === before.granted - 13);
      expect((await usageEventsOf(gw.redis.client, gw.account)).at(-1)).toMatchObject({ api: 'completions', outcome: 'complete', cachedTokens: 6 });
      const plain = await (await post(gw, { model: 'coder', prompt: 'def', stream: true })).text();
      expect(plain).not.toContain('"usage"');
      expect(plain.endsWith('data: [DONE]\n\n')).toBe(true);
    });
  });

  it('ends a stream the upstream breaks off with the error event, unpaid', async () => {
    const breaking: Script = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(textChunk('def') + 'data: {"error": {"message": "engine died"}}\n\n');
    };
    await withGatewayOn([breaking], (urls) => ({ models: [model(urls)] }), async (gw) => {
      const before = await readBalance(gw.redis.client, gw.account);
      const text = await (await post(gw, { model: 'coder', prompt: 'def', stream: true })).text();
      expect(text.trim().split('\n\n').at(-1)).toBe('data: {"error":{"message":"The model stopped answering before the reply was complete. Nothing was charged for this reply; please retry.","type":"server_error","param":null,"code":null}}');
      await sleep(100);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
    });
  });

  it("fans n out over a server that answers one choice per call, and passes on its context error as chat's", async () => {
    await withGatewayOn([completer], (urls) => ({ models: [model(urls, 'llamacpp')] }), async (gw, [up]) => {
      const reply = await gw.client.completions.create({ model: 'coder', prompt: 'def', n: 2, seed: 7 });
      expect(reply.choices.map((c) => c.index)).toEqual([0, 1]);
      expect(up.received.map((r) => r.body.seed)).toEqual([7, 8]);
      up.setScript((_req, res) => replyJson(res, { error: { code: 400, message: 'the request exceeds the available context size, try increasing it', type: 'exceed_context_size_error' } }, 400));
      const res = await post(gw, { model: 'coder', prompt: 'def' });
      expect(res.status).toBe(400);
      expect((await res.json()).error.code).toBe('context_length_exceeded');
    });
  });

  it('refuses a model that does not serve completions, and a batch of more prompts than a request may carry, before any upstream call', async () => {
    await withGatewayOn([completer], ([url]) => ({ models: [modelEntry('chatty', [{ kind: 'vllm', url }]), model([url])] }), async (gw, [up]) => {
      const notServed = await post(gw, { model: 'chatty', prompt: 'def' });
      expect(notServed.status).toBe(400);
      expect((await notServed.json()).error.code).toBe('model_not_supported');
      const tooMany = await post(gw, { model: 'coder', prompt: Array.from({ length: 33 }, (_, i) => `p${i}`) });
      expect(tooMany.status).toBe(400);
      expect((await tooMany.json()).error.param).toBe('prompt');
      expect(up.received).toHaveLength(0);
    });
  });

  /** Answers each prompt with "<prompt>#<choice>", 3 prompt tokens per prompt, 2 cached, 1 reply token per choice. */
  const batchAnswerer: Script = (req, res) => {
    const n = req.body.n ?? 1;
    const prompt = String(req.body.prompt);
    const batchUsage = { prompt_tokens: 3, completion_tokens: n, total_tokens: 3 + n, prompt_tokens_details: { cached_tokens: 2 } };
    if (req.body.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < n; i++) res.write(textChunk(`${prompt}#${i}`, 'stop', i));
      res.end(`data: ${JSON.stringify({ id: 'cmpl-up', object: 'text_completion', created: 1, model: 'up', choices: [], usage: batchUsage })}\n\ndata: [DONE]\n\n`);
      return;
    }
    replyJson(res, { id: 'cmpl-up', object: 'text_completion', created: 1, model: 'up', choices: Array.from({ length: n }, (_, index) => ({ index, text: `${prompt}#${index}`, logprobs: null, finish_reason: 'stop' })), usage: batchUsage });
  };

  for (const kind of ['vllm', 'llamacpp']) {
    it(`answers a batch of prompts with n each, choice i × n + j for prompt i's j-th reply, each prompt counted and charged once (${kind})`, async () => {
      await withGatewayOn([batchAnswerer], (urls) => ({ models: [model(urls, kind)] }), async (gw, [up]) => {
        const before = (await readBalance(gw.redis.client, gw.account))!;
        const reply = await gw.client.completions.create({ model: 'coder', prompt: ['a', 'b', 'c'], n: 2, max_tokens: 1 });
        // A one-choice server answers each of its calls as choice 0.
        const reply_ = (p: string, j: number) => `${p}#${kind === 'vllm' ? j : 0}`;
        expect(reply.choices.map((c) => [c.index, c.text])).toEqual([
          [0, reply_('a', 0)], [1, reply_('a', 1)], [2, reply_('b', 0)], [3, reply_('b', 1)], [4, reply_('c', 0)], [5, reply_('c', 1)],
        ]);
        // Each prompt's 3 tokens once, however many calls served its n; every reply token.
        expect(reply.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 6, prompt_tokens_details: { cached_tokens: 6 } });
        expect(up.received.map((r) => r.body.prompt)).toEqual(kind === 'vllm' ? ['a', 'b', 'c'] : ['a', 'a', 'b', 'b', 'c', 'c']);
        // 3 uncached × 1 + 6 cached × 0.1 + 6 completion × 2 micro-units, rounded up once.
        await until(async () => (await readBalance(gw.redis.client, gw.account))!.granted === before.granted - 16);

        const stream = await gw.client.completions.create({ model: 'coder', prompt: [[1, 2], [3]], n: 2, max_tokens: 1, stream: true, stream_options: { include_usage: true } });
        const texts: string[] = [];
        let streamedUsage;
        for await (const chunk of stream) {
          for (const c of chunk.choices) if (c.text) texts[c.index] = c.text;
          if (chunk.usage) streamedUsage = chunk.usage;
        }
        expect(texts).toEqual([reply_('1,2', 0), reply_('1,2', 1), reply_('3', 0), reply_('3', 1)]);
        expect(streamedUsage).toMatchObject({ prompt_tokens: 6, completion_tokens: 4 });
      });
    });
  }
});
