// Through Parley with the real `openai` client to a real llama.cpp engine
// (`parley engine`): Parley's own model always, and the shared fixture
// models with real tokenizers when ../shared/models is present.
import { basename, join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { readGgufFileInfo } from 'node-llama-cpp';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { DEFAULT_MODEL_FILE } from '../../src/engine/model-maker.js';
import { fixtureModelPaths } from '../support/fixture-models.js';
import { asAdmin, makeAccount, modelEntry, postChat, startTestGateway, type TestGateway } from '../support/gateway.js';

const MODELS: { name: string; local: Record<string, unknown> }[] = [
  { name: 'parley-tiny (generated)', local: { contextSize: 4096, parallel: 4 } },
  ...fixtureModelPaths.map((model) => ({ name: basename(model), local: { model, contextSize: 4096, parallel: 4 } })),
];

const SYSTEM = 'You are the assistant of a team that builds an LLM gateway. Answer every question about tokens, caches and streams with care, and say when you do not know. '.repeat(4);
const user = (content: string) => [{ role: 'system' as const, content: SYSTEM }, { role: 'user' as const, content }];

async function sseLines(res: Response): Promise<string[]> {
  return (await res.text()).split('\n').filter((l) => l !== '');
}

describe.each(MODELS)('local engine: $name', ({ local }) => {
  let gw: TestGateway;
  const model = 'local-model';

  beforeAll(async () => {
    gw = await startTestGateway({ models: [modelEntry(model, [{ kind: 'parley-engine', local }], { api: ['chat', 'completions', 'embeddings'] })] });
  });
  afterAll(() => gw?.close());

  it('answers a whole reply with usage and the model id the client asked for', async () => {
    const r = await gw.client.chat.completions.create({ model, messages: user('hello'), max_tokens: 8 });
    expect(r.object).toBe('chat.completion');
    expect(r.model).toBe(model);
    expect(r.choices).toHaveLength(1);
    expect(r.choices[0].message.role).toBe('assistant');
    expect(typeof r.choices[0].message.content).toBe('string');
    expect(['stop', 'length']).toContain(r.choices[0].finish_reason);
    const u = r.usage!;
    expect(u.prompt_tokens).toBeGreaterThan(20);
    expect(u.completion_tokens).toBeGreaterThan(0);
    expect(u.completion_tokens).toBeLessThanOrEqual(8);
    expect(u.total_tokens).toBe(u.prompt_tokens + u.completion_tokens);
    expect(u.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(0);
  });

  it('streams role first, then content, then finish_reason and [DONE], without usage unless asked', async () => {
    const res = await postChat(gw, { model, messages: user('stream please'), max_tokens: 6, stream: true });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const lines = await sseLines(res);
    expect(lines.at(-1)).toBe('data: [DONE]');
    const chunks = lines.filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    expect(chunks.slice(1).every((c) => c.choices[0].delta.role === undefined)).toBe(true);
    expect(chunks.at(-1).choices[0].finish_reason).toMatch(/stop|length/);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === model && !('usage' in c))).toBe(true);
  });

  it('ends a stream with one usage chunk with empty choices when include_usage is true', async () => {
    const stream = await gw.client.chat.completions.create({ model, messages: user('usage please'), max_tokens: 6, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage!.completion_tokens).toBeGreaterThan(0);
    expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens);
    expect(chunks.slice(0, -1).every((c) => c.usage === null && c.choices.length === 1)).toBe(true);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(text.length).toBeGreaterThan(0);
  });

  it('returns n: 3 choices, numbered, with every reply counted in completion_tokens', async () => {
    const r = await gw.client.chat.completions.create({ model, messages: user('three'), max_tokens: 5, n: 3, seed: 7 });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(r.usage!.completion_tokens).toBeGreaterThanOrEqual(3);
    expect(r.usage!.completion_tokens).toBeLessThanOrEqual(15);
    expect(new Set(r.choices.map((c) => c.message.content)).size).toBeGreaterThan(1);
  });

  it('streams n: 2 choices each opened with its role', async () => {
    const stream = await gw.client.chat.completions.create({ model, messages: user('two'), max_tokens: 4, n: 2, stream: true });
    const opened = new Map<number, string | undefined>();
    const finished = new Set<number>();
    for await (const c of stream) {
      for (const ch of c.choices) {
        if (!opened.has(ch.index)) opened.set(ch.index, ch.delta.role);
        if (ch.finish_reason) finished.add(ch.index);
      }
    }
    expect([...opened.entries()].sort()).toEqual([[0, 'assistant'], [1, 'assistant']]);
    expect([...finished].sort()).toEqual([0, 1]);
  });

  it('repeats a reply for a repeated seed', async () => {
    const ask = (seed: number) => gw.client.chat.completions.create({ model, messages: user('seeded'), max_tokens: 12, temperature: 1, seed });
    const [a, b] = [await ask(42), await ask(42)];
    expect(a.choices[0].message.content).toBe(b.choices[0].message.content);
  });

  it('stops at a stop string and leaves it out', async () => {
    const ask = (stop?: string) => gw.client.chat.completions.create({ model, messages: user('stop'), max_tokens: 24, temperature: 0.7, seed: 5, ...(stop ? { stop: [stop] } : {}) });
    const full = (await ask()).choices[0].message.content!;
    const at = Array.from({ length: full.length }, (_, i) => i).find((i) => i >= 2 && full.slice(i, i + 2).trim().length === 2 && !full.slice(i, i + 2).includes('\uFFFD') && full.indexOf(full.slice(i, i + 2)) === i);
    expect(at, `no usable stop string in ${JSON.stringify(full)}`).toBeDefined();
    const stop = full.slice(at!, at! + 2);
    const r = await ask(stop);
    expect(r.choices[0].message.content).toBe(full.slice(0, at));
    expect(r.choices[0].finish_reason).toBe('stop');
  });

  it('returns logprobs with the asked number of alternatives', async () => {
    const r = await gw.client.chat.completions.create({ model, messages: user('logprobs'), max_tokens: 4, logprobs: true, top_logprobs: 3 });
    const content = r.choices[0].logprobs!.content!;
    expect(content.length).toBe(r.usage!.completion_tokens);
    for (const t of content) {
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs).toHaveLength(3);
    }
  });

  it('applies logit_bias to every token, those that end a reply too', async () => {
    const path = (local.model as string | undefined) ?? join(gw.dataDir, 'models', DEFAULT_MODEL_FILE);
    const vocabulary = (await readGgufFileInfo(path)).metadata.tokenizer.ggml;
    const enders = vocabulary.tokens.flatMap((t, id) => (id === vocabulary.eos_token_id || /^(<\|(im_end|endoftext|eot_id|end)\|>|<\/s>)$/.test(t) ? [id] : []));
    const ask = (bias: number, max_tokens: number) =>
      gw.client.chat.completions.create({ model, messages: user('bias'), max_tokens, seed: 5, logit_bias: Object.fromEntries(enders.map((id) => [id, bias])) });
    const ended = await ask(100, 50);
    expect(ended.choices[0].finish_reason).toBe('stop');
    expect(ended.usage!.completion_tokens).toBe(0);
    const endless = await ask(-100, 400);
    expect(endless.choices[0].finish_reason).toBe('length');
    expect(endless.usage!.completion_tokens).toBe(400);
  });

  it("refuses a tenant's text that is not valid Unicode before the engine, and keeps serving the others", async () => {
    const other = await makeAccount(gw.redis, 1);
    const before = await readBalance(gw.redis.client, gw.account);
    for (let i = 0; i < 4; i++) {
      const res = await postChat(gw, { model, messages: user(`a\ud800b ${i}`), max_tokens: 4 });
      expect(res.status).toBe(400);
      expect((await res.json()).error).toMatchObject({ type: 'invalid_request_error', param: 'messages[1].content' });
    }
    expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
    const res = await postChat({ url: gw.url, apiKey: other.key }, { model, messages: user('hello'), max_tokens: 4 });
    expect(res.status).toBe(200);
    const view = await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json();
    expect(view.data[0].endpoints[0]).toMatchObject({ circuit: 'closed', failures: 0 });
  });

  it("refuses a prompt of token ids outside the vocabulary before it joins a batch, and the requests beside it are served", async () => {
    const other = await makeAccount(gw.redis, 1);
    const before = await readBalance(gw.redis.client, gw.account);
    for (let round = 0; round < 3; round++) {
      const bad = fetch(`${gw.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}` },
        body: JSON.stringify({ model, prompt: [99999999], max_tokens: 2 }),
      });
      const good = Array.from({ length: 3 }, (_, i) => postChat({ url: gw.url, apiKey: other.key }, { model, messages: user(`round ${round} ${i}`), max_tokens: 4 }));
      const answer = await bad;
      expect(answer.status).toBe(400);
      expect((await answer.json()).error).toMatchObject({ type: 'invalid_request_error', param: 'prompt' });
      expect((await Promise.all(good)).map((r) => r.status)).toEqual([200, 200, 200]);
    }
    expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
    const view = await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json();
    expect(view.data[0].endpoints[0]).toMatchObject({ circuit: 'closed' });
  });

  it('embeds texts and token ids through Parley, as floats or base64, each vector the same size, with its tokens charged', async () => {
    const before = (await readBalance(gw.redis.client, gw.account))!;
    const texts = await gw.client.embeddings.create({ model, input: ['hello', 'a longer sentence to embed'], encoding_format: 'float' });
    expect(texts.model).toBe(model);
    expect(texts.data.map((d) => d.index)).toEqual([0, 1]);
    const size = texts.data[0].embedding.length;
    expect(size).toBeGreaterThan(0);
    expect(texts.data[1].embedding).toHaveLength(size);
    expect(texts.usage.prompt_tokens).toBeGreaterThan(2);
    // The client's default asks for base64 and decodes it: the same vector as floats.
    const decoded = await gw.client.embeddings.create({ model, input: 'hello' });
    decoded.data[0].embedding.forEach((x, i) => expect(x).toBeCloseTo(texts.data[0].embedding[i], 4));
    const ids = await gw.client.embeddings.create({ model, input: [[1, 2, 3]], encoding_format: 'float' });
    expect(ids.usage.prompt_tokens).toBe(3);
    await expect.poll(async () => (await readBalance(gw.redis.client, gw.account))!.granted).toBeLessThan(before.granted);
  });

  it('completes raw text, whole and streamed, with echo, and the usage chunk when asked for', async () => {
    const whole = await gw.client.completions.create({ model, prompt: 'The cache', max_tokens: 5, echo: true, seed: 3 });
    expect(whole.object).toBe('text_completion');
    expect(whole.choices[0].text.startsWith('The cache')).toBe(true);
    expect(whole.usage!.completion_tokens).toBeGreaterThan(0);
    expect(whole.usage!.completion_tokens).toBeLessThanOrEqual(5);
    const stream = await gw.client.completions.create({ model, prompt: 'The cache', max_tokens: 5, seed: 3, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let last;
    for await (const c of stream) {
      text += c.choices[0]?.text ?? '';
      last = c;
    }
    expect(text).toBe(whole.choices[0].text.slice('The cache'.length));
    expect(last!.usage!.completion_tokens).toBe(whole.usage!.completion_tokens);
  });

  it("answers Anthropic's Messages API, whole and streamed, with count_tokens exact by the model's tokenizer", async () => {
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
    const ask = { model, max_tokens: 8, system: SYSTEM, messages: [{ role: 'user' as const, content: 'hello' }] };
    const { input_tokens } = await anthropic.messages.countTokens(ask);
    const stream = anthropic.messages.stream(ask);
    let started = 0;
    stream.on('streamEvent', (e) => e.type === 'message_start' && (started = e.message.usage.input_tokens));
    const streamed = await stream.finalMessage();
    expect(started).toBe(input_tokens);
    expect(streamed.usage.input_tokens + (streamed.usage.cache_read_input_tokens ?? 0)).toBe(input_tokens);
    expect(['end_turn', 'max_tokens']).toContain(streamed.stop_reason);
    const whole = await anthropic.messages.create(ask);
    expect(whole.content.every((b) => b.type === 'text')).toBe(true);
    expect(whole.usage.output_tokens).toBeGreaterThan(0);
    expect(whole.usage.output_tokens).toBeLessThanOrEqual(8);
    const tooLong = anthropic.messages.create({ ...ask, messages: [{ role: 'user', content: 'tokens '.repeat(5_000) }] });
    await expect(tooLong).rejects.toMatchObject({ status: 400, error: { error: { type: 'invalid_request_error', message: expect.stringMatching(/^prompt is too long: \d+ tokens > 4096 maximum$/) } } });
  });

  it("answers OpenAI's Responses API, whole and streamed", async () => {
    const whole = await gw.client.responses.create({ model, instructions: SYSTEM, input: 'hello', max_output_tokens: 8 });
    expect(['completed', 'incomplete']).toContain(whole.status);
    expect(whole.usage!.input_tokens).toBeGreaterThan(20);
    expect(whole.usage!.output_tokens).toBeLessThanOrEqual(8);
    const stream = gw.client.responses.stream({ model, instructions: SYSTEM, input: 'hello', max_output_tokens: 8 });
    let deltas = '';
    for await (const e of stream) if (e.type === 'response.output_text.delta') deltas += e.delta;
    expect((await stream.finalResponse()).output_text).toBe(deltas);
  });

  it('ignores fields it does not know', async () => {
    const r = await postChat(gw, { model, messages: user('unknown'), max_tokens: 2, user: 'u-1', metadata: { a: '1' }, store: true, some_future_field: [1, 2] });
    expect(r.status).toBe(200);
    expect((await r.json()).choices).toHaveLength(1);
  });

  it('refuses prompt plus max_tokens over the context window with context_length_exceeded', async () => {
    const err = await gw.client.chat.completions.create({ model, messages: user('too long'), max_tokens: 5000 }).catch((e) => e);
    expect(err.status).toBe(400);
    expect(err.code).toBe('context_length_exceeded');
    expect(err.param).toBe('messages');
    expect(err.type).toBe('invalid_request_error');
  });

  it('reports the repeated prefix of a conversation as cached tokens', async () => {
    const first = await gw.client.chat.completions.create({ model, messages: user('first turn of the cache test'), max_tokens: 2 });
    const second = await gw.client.chat.completions.create({ model, messages: user('second turn, same system prompt'), max_tokens: 2 });
    const cached = second.usage!.prompt_tokens_details!.cached_tokens!;
    expect(cached).toBeGreaterThan(first.usage!.prompt_tokens / 2);
    expect(cached).toBeLessThan(second.usage!.prompt_tokens);
  });

  it('keeps one conversation\'s cache when another arrives, using a free sequence instead', async () => {
    const tenant = (name: string, q: string) => [{ role: 'system' as const, content: `${name}: ${SYSTEM}` }, { role: 'user' as const, content: q }];
    await gw.client.chat.completions.create({ model, messages: tenant('alpha', 'one'), max_tokens: 1 });
    await gw.client.chat.completions.create({ model, messages: tenant('beta', 'one'), max_tokens: 1 });
    const again = await gw.client.chat.completions.create({ model, messages: tenant('alpha', 'two'), max_tokens: 1 });
    expect(again.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(again.usage!.prompt_tokens / 2);
  });

  it("keeps each account's prefix cache to itself: another account's same prompt finds nothing cached", async () => {
    const { key } = await makeAccount(gw.redis, 10);
    const other = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    const prompt = user('a question only these two accounts ask');
    await gw.client.chat.completions.create({ model, messages: prompt, max_tokens: 1 });
    const cachedOf = async (client: OpenAI) => (await client.chat.completions.create({ model, messages: prompt, max_tokens: 1 })).usage!.prompt_tokens_details!.cached_tokens!;
    expect(await cachedOf(other)).toBe(0);
    expect(await cachedOf(other)).toBeGreaterThan(0);
    expect(await cachedOf(gw.client)).toBeGreaterThan(0);
    // The engine takes a salt as vLLM does: a string, not empty.
    const engine = gw.context.routing().models.get(model)!.endpoints[0].url;
    for (const cache_salt of [5, '']) {
      const res = await fetch(`${engine}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: prompt, max_tokens: 1, cache_salt }) });
      expect(res.status).toBe(400);
      expect((await res.json()).error.param).toBe('cache_salt');
    }
  });

  it('runs an OpenAI batch and an Anthropic message batch on the engine, lines sharing the system prompt reading it from cache', async () => {
    const lines = Array.from({ length: 6 }, (_, i) =>
      JSON.stringify({ custom_id: `eval-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model, messages: user(`question ${i}`), max_tokens: 4 } }),
    );
    const file = await gw.client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'eval.jsonl'), purpose: 'batch' });
    let batch = await gw.client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await expect.poll(async () => (batch = await gw.client.batches.retrieve(batch.id)).status, { timeout: 60_000 }).toBe('completed');
    expect(batch.request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
    const output = (await (await gw.client.files.content(batch.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
    expect(output.map((l) => l.custom_id)).toEqual(lines.map((_, i) => `eval-${i}`));
    expect(output.every((l) => typeof l.response.body.choices[0].message.content === 'string')).toBe(true);
    expect(batch.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);

    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
    const created = await anthropic.messages.batches.create({ requests: [0, 1].map((i) => ({ custom_id: `m-${i}`, params: { model, max_tokens: 4, system: SYSTEM, messages: [{ role: 'user' as const, content: `q ${i}` }] } })) });
    await expect.poll(async () => (await anthropic.messages.batches.retrieve(created.id)).processing_status, { timeout: 60_000 }).toBe('ended');
    const results = [];
    for await (const r of await anthropic.messages.batches.results(created.id)) results.push(r.result.type);
    expect(results).toEqual(['succeeded', 'succeeded']);
  });

  it('charges the cached part of the prompt at the hit price, and all n replies', async () => {
    await gw.client.chat.completions.create({ model, messages: user('warm the cache'), max_tokens: 2, n: 3 });
    const before = (await readBalance(gw.redis.client, gw.account))!;
    const r = await gw.client.chat.completions.create({ model, messages: user('billed turn'), max_tokens: 4, n: 3 });
    const u = r.usage!;
    const cached = u.prompt_tokens_details!.cached_tokens!;
    expect(cached).toBeGreaterThan(0);
    // modelEntry prices per million: miss 1, hit 0.1, output 2.
    const expected = Math.ceil((u.prompt_tokens - cached) * 1 + cached * 0.1 + u.completion_tokens * 2);
    let after = before;
    for (let i = 0; i < 100 && after.granted === before.granted; i++) {
      await new Promise((r) => setTimeout(r, 20));
      after = (await readBalance(gw.redis.client, gw.account))!;
    }
    expect(before.granted - after.granted).toBe(expected);
  });
});
