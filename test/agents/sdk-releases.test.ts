// The openai package, Anthropic's SDK and the AI SDK's OpenAI and Anthropic
// providers, each its pinned and its newest release, on Parley's own engine
// (the quickstart's model): every API a team calls through them answers in
// the shape that release reads, and each request is charged what its usage
// says.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageEvent } from '../../src/billing/usage-events.js';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { makeAccount, modelEntry, startTestGateway, type TestGateway } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';
import { eachRelease, sdkReleases } from '../support/sdk-releases.js';

const MODEL = 'parley-tiny';
let gw: TestGateway;

beforeAll(async () => {
  const local = { contextSize: 4096, parallel: 4 };
  gw = await startTestGateway({ models: [modelEntry(MODEL, [{ kind: 'parley-engine', local }], { api: ['chat', 'embeddings'] })] });
}, 120_000);
afterAll(() => gw?.close());

describe.each(eachRelease(await sdkReleases()))('%s', (_, sdk) => {
  let account: string;
  let key: string;

  beforeAll(async () => {
    ({ account, key } = await makeAccount(gw.redis, 10));
  });

  it("openai: chat whole and streamed, embeddings in the client's default base64, Responses whole and streamed, an unknown model as NotFoundError", async () => {
    const client = new sdk.openai.default({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    const whole = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 6 });
    expect(whole.choices[0].message.role).toBe('assistant');
    expect(whole.usage!.completion_tokens).toBeGreaterThan(0);

    const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'stream' }], max_tokens: 6, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      usage = c.usage ?? usage;
    }
    expect(text.length).toBeGreaterThan(0);
    expect(usage!.completion_tokens).toBeGreaterThan(0);

    const floats = await client.embeddings.create({ model: MODEL, input: 'hello', encoding_format: 'float' });
    const decoded = await client.embeddings.create({ model: MODEL, input: 'hello' });
    expect(decoded.data[0].embedding).toHaveLength(floats.data[0].embedding.length);
    decoded.data[0].embedding.forEach((x, i) => expect(x).toBeCloseTo(floats.data[0].embedding[i], 4));

    const response = await client.responses.create({ model: MODEL, input: 'hello', max_output_tokens: 6 });
    expect(response.output_text.length).toBeGreaterThan(0);
    expect(response.usage!.output_tokens).toBeGreaterThan(0);
    const events = await client.responses.create({ model: MODEL, input: 'stream', max_output_tokens: 6, stream: true });
    const types: string[] = [];
    for await (const e of events) types.push(e.type);
    expect(types[0]).toBe('response.created');
    expect(types).toContain('response.output_text.delta');
    expect(types.at(-1)).toMatch(/^response\.(completed|incomplete)$/);

    const unknown = client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] });
    await expect(unknown).rejects.toBeInstanceOf(sdk.openai.NotFoundError);
    await expect(unknown).rejects.toMatchObject({ status: 404, code: 'model_not_found', type: 'invalid_request_error' });
  });

  it("Anthropic's SDK: Messages whole and streamed, with their usage", async () => {
    const client = new sdk.anthropic.default({ baseURL: gw.url, apiKey: key, maxRetries: 0 });
    const whole = await client.messages.create({ model: MODEL, max_tokens: 6, messages: [{ role: 'user', content: 'hello' }] });
    expect(whole.content[0].type).toBe('text');
    expect(whole.usage.output_tokens).toBeGreaterThan(0);
    const streamed = await client.messages.stream({ model: MODEL, max_tokens: 6, messages: [{ role: 'user', content: 'stream' }] }).finalMessage();
    expect(streamed.stop_reason).toMatch(/^(end_turn|max_tokens)$/);
    expect(streamed.usage.output_tokens).toBeGreaterThan(0);
  });

  it("the AI SDK's OpenAI provider: generateText and streamText, through Responses and through chat", async () => {
    const provider = sdk.aiOpenAI.createOpenAI({ baseURL: `${gw.url}/v1`, apiKey: key });
    for (const model of [provider(MODEL), provider.chat(MODEL)]) {
      const whole = await sdk.ai.generateText({ model, prompt: 'hello', maxOutputTokens: 6 });
      expect(whole.text.length).toBeGreaterThan(0);
      expect(whole.usage.outputTokens).toBeGreaterThan(0);
      const streamed = sdk.ai.streamText({ model, prompt: 'stream', maxOutputTokens: 6 });
      expect((await streamed.text).length).toBeGreaterThan(0);
      expect((await streamed.usage).outputTokens).toBeGreaterThan(0);
    }
  });

  it("the AI SDK's Anthropic provider: generateText and streamText through Messages", async () => {
    const provider = sdk.aiAnthropic.createAnthropic({ baseURL: `${gw.url}/v1`, apiKey: key });
    const whole = await sdk.ai.generateText({ model: provider(MODEL), prompt: 'hello', maxOutputTokens: 6 });
    expect(whole.text.length).toBeGreaterThan(0);
    expect(whole.usage.outputTokens).toBeGreaterThan(0);
    const streamed = sdk.ai.streamText({ model: provider(MODEL), prompt: 'stream', maxOutputTokens: 6 });
    expect((await streamed.text).length).toBeGreaterThan(0);
    expect((await streamed.usage).outputTokens).toBeGreaterThan(0);
  });

  it('charged each request once, what its usage says: the balance fell by the sum, the refused one cost nothing', async () => {
    await expect.poll(async () => (await usageEventsOf(gw.redis.client, account)).length).toBe(14);
    const events = await usageEventsOf(gw.redis.client, account);
    const byApi = (api: string) => events.filter((e) => e.api === api).length;
    expect([byApi('chat'), byApi('embeddings'), byApi('responses'), byApi('messages')]).toEqual([4, 2, 4, 4]);
    // modelEntry's prices: 1, 0.1 and 2 a million tokens, so 1, 0.1 and 2 micro-units a token, rounded up a reply.
    const priced = (e: UsageEvent) => Math.ceil(((e.promptTokens - e.cachedTokens) * 10 + e.cachedTokens + 20 * e.completionTokens) / 10);
    expect(events.every((e) => e.outcome === 'complete' && (e.api === 'embeddings' || e.completionTokens > 0) && e.cost === priced(e) && e.charged === e.cost)).toBe(true);
    expect(new Set(events.map((e) => e.requestId)).size).toBe(events.length);
    const balance = (await readBalance(gw.redis.client, account))!;
    expect(balance).toEqual({ granted: 10_000_000 - events.reduce((sum, e) => sum + e.charged, 0), toppedUp: 0, held: 0 });
  });
});
