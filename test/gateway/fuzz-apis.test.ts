// Generated requests to the chat, completions, Messages and Responses APIs
// and both batch APIs, each answered by a scripted upstream with what a model
// might write: a tenant steers its model with its prompt, so a tool call's
// name and arguments, its content and its finish may be anything the
// upstream's format lets through, and some servers leave out what OpenAI
// always sends. Each reply is read back by the API's own SDK, whole or
// streamed, as its clients would read it, and charged exactly.
import Anthropic from '@anthropic-ai/sdk';
import fc from 'fast-check';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { parseChatCompletionRequest } from '../../src/protocol/chat-request.js';
import { parseCompletionRequest } from '../../src/protocol/completions.js';
import { ApiError } from '../../src/protocol/errors.js';
import { chunk, completionBody, replyJson, until, writeEvents, type FakeUpstream, type Script } from '../support/fake-upstream.js';
import { type GatewayOnUpstreams, modelEntry, startGatewayOn, type TestGateway } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';

let running: GatewayOnUpstreams;
let upstream: FakeUpstream;
let gw: TestGateway;

const text = fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom('', '{', '{"a":', '[]', 'null', '{"x":1}', '\u0000', '𝕏'));
const anything = fc.anything({ maxDepth: 3 });
const DIALECT_KINDS = ['vllm', 'sglang', 'llamacpp', 'deepseek', 'openai'];
const dialectModel = fc.constantFrom(...DIALECT_KINDS);
/** Mostly what the API takes, now and then anything at all: most requests get past validation to the mapping. */
const mostly = <T,>(valid: fc.Arbitrary<T>) => fc.oneof({ arbitrary: valid, weight: 40 }, { arbitrary: anything, weight: 1 });
/** One of `valid`, and now and then anything at all. */
const mostlyOneOf = (...valid: fc.Arbitrary<unknown>[]) => fc.oneof(...valid.map((arbitrary) => ({ arbitrary, weight: 20 })), { arbitrary: anything, weight: 1 });

// What a model says: a tenant steers it with its prompt, so it may be anything the upstream's format allows.
const toolCall = fc.record({ id: mostly(text), type: fc.constantFrom('function', 'other'), function: fc.record({ name: mostly(text), arguments: mostly(text) }, { requiredKeys: [] }) }, { requiredKeys: [] });
const message = fc.record({ role: fc.constantFrom('assistant'), content: mostly(fc.oneof(text, fc.constant(null))), tool_calls: mostly(fc.array(toolCall, { maxLength: 3 })), reasoning_content: mostly(text) }, { requiredKeys: ['role'] });
const finish = mostly(fc.constantFrom('stop', 'length', 'tool_calls', 'content_filter', null));
/** A choice's index: 0 for one reply, but a server may number otherwise. */
const choiceIndex = mostly(fc.constantFrom(0, 0, 0, 1, 2));
const streamedDelta = fc.oneof(
  fc.record({ content: text }),
  fc.record({ tool_calls: fc.array(fc.record({ index: mostly(fc.nat(3)), id: text, function: fc.record({ name: text, arguments: text }, { requiredKeys: [] }) }, { requiredKeys: [] }), { maxLength: 2 }) }),
  fc.record({ reasoning_content: text }),
  anything,
);
/** What the model writes for a request: its whole reply's choices, or its stream's pieces and finish. */
const reply = fc.record({
  choices: fc.array(fc.record({ index: choiceIndex, message, finish_reason: finish }), { minLength: 1, maxLength: 2 }),
  finish,
  streamed: fc.array(fc.record({ index: choiceIndex, delta: streamedDelta }), { maxLength: 5 }),
});
let nextReply: { choices: { index: unknown; message: unknown; finish_reason: unknown }[]; finish: unknown; streamed: { index: unknown; delta: unknown }[] } = { choices: [], finish: 'stop', streamed: [] };

/**
 * What Parley sent upstream that is not a request it would take itself: each API's mapping must send a valid one.
 * Past OpenAI's 4 stop strings is left out: Anthropic's clients may send more, and vLLM and SGLang take them.
 */
let invalidUpstreamRequests: string[] = [];

const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };

/** A text completion's reply: the model's words as text, whatever they were. */
const textCompletion: Script = (req, res) => {
  const textOf = (said: unknown) => {
    const content = (said as { content?: unknown } | null)?.content ?? '';
    return content === null ? '' : content;
  };
  const body = (choices: unknown[], extra = {}) => ({ id: 'up-1', object: 'text_completion', created: 1, model: 'up', choices, ...extra });
  if (req.body.stream) {
    const events = nextReply.streamed.map(({ index, delta }) => body([{ index, text: textOf(delta), logprobs: null, finish_reason: null }]));
    return writeEvents(res, [...events, body([{ index: 0, text: '', logprobs: null, finish_reason: nextReply.finish }]), body([], { usage })]);
  }
  replyJson(res, body(nextReply.choices.map((c) => ({ index: c.index, text: textOf(c.message), logprobs: null, finish_reason: c.finish_reason })), { usage }));
};

const script: Script = (req, res) => {
  // The endpoint's health probe.
  if (req.path === '/v1/models') return replyJson(res, { object: 'list', data: [] });
  const isText = req.path === '/v1/completions';
  const parsed = isText ? parseCompletionRequest({ ...req.body, stop: undefined }) : parseChatCompletionRequest({ ...req.body, stop: undefined });
  if (parsed instanceof ApiError) invalidUpstreamRequests.push(`${parsed.message}: ${JSON.stringify(req.body)}`);
  if (isText) return textCompletion(req, res);
  // An engine held to a JSON format (vLLM's guided decoding) writes JSON, which the SDKs' stream readers parse.
  const json = ['json_object', 'json_schema'].includes(req.body.response_format?.type);
  if (req.body.stream) {
    const pieces = json ? [{ index: 0, delta: { content: '{}' } }] : nextReply.streamed;
    const events = pieces.map(({ index, delta }) => ({ ...chunk({}), choices: [{ index, delta, logprobs: null, finish_reason: null }] }));
    return writeEvents(res, [...events, chunk({}, nextReply.finish as string), { ...chunk({}), choices: [], usage }]);
  }
  const choices = json ? [{ index: 0, message: { role: 'assistant', content: '{}' }, finish_reason: 'stop' }] : nextReply.choices;
  replyJson(res, { ...completionBody('', usage), choices });
};

beforeAll(async () => {
  running = await startGatewayOn([script], ([url]) => ({
    gateway: { maxBodyBytes: 64 * 1024 },
    // Thousands of requests a minute, each holding its whole context window's tokens: no rate window may stop them.
    rateLimits: { requestsPerMinute: 1_000_000, tokensPerMinute: 1_000_000_000 },
    // A model for each dialect, all on the one scripted server: each reads the same replies its own way.
    models: DIALECT_KINDS.map((kind) => modelEntry(kind, [{ kind, url }], { api: ['chat', 'completions'], supports: { tools: true, jsonOutput: true } })),
  }));
  ({ gw, upstreams: [upstream] } = running);
});
afterAll(() => running.close());

/** The generations the upstream was asked for (its health probe's GETs left out). */
const upstreamCalls = () => upstream.received.filter((r) => r.path !== '/v1/models').length;

/** The account's balance once nothing is held: a request's settlement lands just after its reply. */
async function settledBalance() {
  await until(async () => (await readBalance(gw.redis.client, gw.account))!.held === 0);
  return (await readBalance(gw.redis.client, gw.account))!;
}

interface RawReply {
  status: number;
  contentType: string;
  body: string;
}

/** The reply as it came, for the SDK to read again. */
async function post(path: string, body: string, headers: Record<string, string>): Promise<RawReply> {
  const res = await fetch(`${gw.url}${path}`, { method: 'POST', headers, body });
  return { status: res.status, contentType: String(res.headers.get('content-type')), body: await res.text() };
}

const object = fc.dictionary(fc.string({ maxLength: 5 }), anything, { maxKeys: 3 });
const schema = mostlyOneOf(fc.constant({ type: 'object', properties: { a: { type: 'string' } } }), object);

const block = mostlyOneOf(
  fc.record({ type: fc.constant('text'), text: mostly(text), cache_control: mostly(fc.constant({ type: 'ephemeral' })) }, { requiredKeys: ['type', 'text'] }),
  fc.record({ type: fc.constant('image'), source: mostly(fc.record({ type: fc.constantFrom('base64', 'url'), media_type: fc.oneof(fc.constantFrom('image/png', 'image/jpeg'), text), data: text, url: text }, { requiredKeys: [] })) }, { requiredKeys: ['type'] }),
  fc.record({ type: fc.constant('tool_use'), id: mostly(text), name: mostly(text), input: mostlyOneOf(object) }, { requiredKeys: ['type', 'id', 'name', 'input'] }),
  fc.record({ type: fc.constant('tool_result'), tool_use_id: mostly(text), content: mostlyOneOf(text, fc.array(fc.record({ type: fc.constantFrom('text', 'image'), text }), { maxLength: 2 })), is_error: mostly(fc.boolean()) }, { requiredKeys: ['type', 'tool_use_id'] }),
  fc.record({ type: fc.constantFrom('thinking', 'redacted_thinking', 'document', 'search_result', 'server_tool_use', 'web_search_tool_result', 'container_upload'), thinking: text, signature: text, data: text }, { requiredKeys: ['type'] }),
);
const anthropicMessage = fc.record({ role: mostlyOneOf(fc.constantFrom('user', 'assistant')), content: mostlyOneOf(text, fc.array(block, { minLength: 1, maxLength: 4 })) });
const messagesBody = fc.record(
  {
    model: mostly(dialectModel),
    max_tokens: mostly(fc.integer({ min: 1, max: 100 })),
    system: mostlyOneOf(text, fc.array(fc.record({ type: fc.constant('text'), text }), { maxLength: 2 })),
    messages: mostly(fc.array(anthropicMessage, { minLength: 1, maxLength: 4 })),
    tools: mostly(fc.array(fc.record({ name: mostly(fc.string({ minLength: 1, maxLength: 10 })), description: text, input_schema: schema, type: mostlyOneOf(fc.constantFrom('custom', 'web_search_20250305', 'bash_20250124')) }, { requiredKeys: ['name', 'input_schema'] }), { maxLength: 2 })),
    tool_choice: mostly(fc.record({ type: mostlyOneOf(fc.constantFrom('auto', 'any', 'tool', 'none')), name: text, disable_parallel_tool_use: mostly(fc.boolean()) }, { requiredKeys: ['type'] })),
    thinking: mostly(fc.record({ type: fc.constantFrom('enabled', 'disabled', 'adaptive'), budget_tokens: mostly(fc.integer({ min: -5, max: 5000 })) }, { requiredKeys: ['type'] })),
    stream: mostly(fc.boolean()),
    stop_sequences: mostly(fc.array(text, { maxLength: 5 })),
    temperature: mostly(fc.double({ min: 0, max: 1, noNaN: true })),
    top_k: mostly(fc.nat(50)),
    metadata: mostly(fc.record({ user_id: text }, { requiredKeys: [] })),
  },
  { requiredKeys: ['model', 'max_tokens', 'messages'] },
);

const contentPart = mostlyOneOf(
  fc.record({ type: fc.constantFrom('input_text', 'output_text', 'text', 'refusal'), text: mostly(text), refusal: text }, { requiredKeys: ['type'] }),
  fc.record({ type: fc.constantFrom('input_image', 'input_file', 'input_audio'), image_url: text, file_id: text, file_data: text, detail: text }, { requiredKeys: ['type'] }),
);
const inputItem = mostlyOneOf(
  fc.record({ type: fc.constantFrom('message', undefined), role: mostlyOneOf(fc.constantFrom('user', 'assistant', 'system', 'developer')), content: mostlyOneOf(text, fc.array(contentPart, { maxLength: 3 })), id: text, status: text }, { requiredKeys: ['role', 'content'] }),
  fc.record({ type: fc.constant('function_call'), call_id: mostly(text), name: mostly(text), arguments: mostly(text), id: text }, { requiredKeys: ['type', 'call_id', 'name', 'arguments'] }),
  fc.record({ type: fc.constant('function_call_output'), call_id: mostly(text), output: mostlyOneOf(text, fc.array(contentPart, { maxLength: 2 })) }, { requiredKeys: ['type', 'call_id', 'output'] }),
  fc.record({ type: fc.constantFrom('reasoning', 'item_reference', 'web_search_call', 'custom_tool_call', 'custom_tool_call_output', 'local_shell_call', 'compaction'), id: text, summary: mostly(fc.array(fc.record({ type: fc.constant('summary_text'), text }))), content: anything, encrypted_content: text, input: text, call_id: text, output: text, name: text }, { requiredKeys: ['type'] }),
);
const responsesBody = fc.record(
  {
    model: mostly(dialectModel),
    input: mostlyOneOf(text, fc.array(inputItem, { minLength: 1, maxLength: 4 })),
    instructions: mostly(text),
    tools: mostly(fc.array(fc.record({ type: mostlyOneOf(fc.constantFrom('function', 'web_search', 'custom', 'local_shell', 'file_search')), name: mostly(text), parameters: schema, format: anything }, { requiredKeys: ['type'] }), { maxLength: 2 })),
    tool_choice: mostlyOneOf(fc.constantFrom('auto', 'none', 'required'), fc.record({ type: fc.constantFrom('function', 'allowed_tools'), name: text, tools: anything, mode: text }, { requiredKeys: ['type'] })),
    text: mostly(fc.record({ format: mostly(fc.record({ type: fc.constantFrom('text', 'json_object', 'json_schema'), name: text, schema, strict: mostly(fc.boolean()) }, { requiredKeys: ['type'] })), verbosity: mostlyOneOf(fc.constantFrom('low', 'medium', 'high')) }, { requiredKeys: [] })),
    reasoning: mostly(fc.record({ effort: mostlyOneOf(fc.constantFrom('minimal', 'low', 'medium', 'high')), summary: mostlyOneOf(fc.constantFrom('auto', 'concise', 'detailed')) }, { requiredKeys: [] })),
    stream: mostly(fc.boolean()),
    store: mostly(fc.boolean()),
    max_output_tokens: mostly(fc.integer({ min: 16, max: 100 })),
    include: mostly(fc.array(fc.constantFrom('reasoning.encrypted_content', 'message.output_text.logprobs'))),
    parallel_tool_calls: mostly(fc.boolean()),
  },
  { requiredKeys: ['model', 'input'] },
);
const chatToolCall = fc.record({ id: mostly(text), type: fc.constant('function'), function: fc.record({ name: mostly(text), arguments: mostly(text) }) });
const chatMessage = mostlyOneOf(
  fc.record({ role: fc.constantFrom('system', 'developer', 'user'), content: mostlyOneOf(text, fc.array(fc.record({ type: fc.constant('text'), text }), { minLength: 1, maxLength: 2 })), name: text }, { requiredKeys: ['role', 'content'] }),
  fc.record({ role: fc.constant('assistant'), content: mostlyOneOf(text, fc.constant(null)), tool_calls: mostly(fc.array(chatToolCall, { minLength: 1, maxLength: 2 })), reasoning_content: text }, { requiredKeys: ['role'] }),
  fc.record({ role: fc.constant('tool'), content: mostly(text), tool_call_id: mostly(text) }),
);
const chatBody = fc.record(
  {
    model: mostly(dialectModel),
    messages: mostly(fc.array(chatMessage, { minLength: 1, maxLength: 4 })),
    tools: mostly(fc.array(fc.record({ type: fc.constant('function'), function: fc.record({ name: fc.string({ minLength: 1, maxLength: 10 }), description: text, parameters: schema }, { requiredKeys: ['name'] }) }), { maxLength: 2 })),
    tool_choice: mostlyOneOf(fc.constantFrom('auto', 'none', 'required'), fc.record({ type: fc.constant('function'), function: fc.record({ name: text }) })),
    response_format: mostly(fc.record({ type: fc.constantFrom('text', 'json_object', 'json_schema'), json_schema: fc.record({ name: fc.string({ minLength: 1, maxLength: 5 }), schema }) }, { requiredKeys: ['type'] })),
    max_tokens: mostly(fc.integer({ min: 1, max: 100 })),
    n: mostly(fc.integer({ min: 1, max: 3 })),
    logprobs: mostly(fc.boolean()),
    stream: mostly(fc.boolean()),
    stream_options: mostly(fc.record({ include_usage: fc.boolean() })),
  },
  { requiredKeys: ['model', 'messages'] },
);

const tokenIds = fc.array(fc.nat(1000), { minLength: 1, maxLength: 4 });
const completionsBody = fc.record(
  {
    model: mostly(dialectModel),
    prompt: mostlyOneOf(text, fc.array(text, { minLength: 1, maxLength: 3 }), tokenIds, fc.array(tokenIds, { minLength: 1, maxLength: 3 })),
    suffix: mostly(text),
    echo: mostly(fc.boolean()),
    logprobs: mostly(fc.integer({ min: 0, max: 5 })),
    max_tokens: mostly(fc.integer({ min: 1, max: 100 })),
    n: mostly(fc.integer({ min: 1, max: 3 })),
    stop: mostly(fc.array(text, { maxLength: 4 })),
    stream: mostly(fc.boolean()),
    stream_options: mostly(fc.record({ include_usage: fc.boolean() })),
  },
  { requiredKeys: ['model', 'prompt'] },
);

/** The official SDK's client, given a reply already received: it reads it as it would Parley's own. */
const replaying = (raw: RawReply) => ({ apiKey: 'unused', maxRetries: 0, timeout: 60_000, fetch: async () => new Response(raw.body, { status: raw.status, headers: { 'content-type': raw.contentType } }) });

/** What the API's official SDK makes of a reply, whole or streamed: it throws where the reply breaks its API. */
async function readByMessagesSdk(request: any, raw: RawReply) {
  const sdk = new Anthropic({ ...replaying(raw), baseURL: gw.url });
  const message = request.stream === true ? await sdk.messages.stream(request).finalMessage() : await sdk.messages.create(request);
  expect(message.type).toBe('message');
}

async function readByOpenAiSdk(request: any, raw: RawReply) {
  const sdk = new OpenAI({ ...replaying(raw), baseURL: `${gw.url}/v1` });
  const response = request.stream === true ? await sdk.responses.stream(request).finalResponse() : await sdk.responses.create(request);
  expect(response.object).toBe('response');
  if (request.stream !== true) return;
  // What the SDK does not check: the events are numbered 0, 1, 2 ..., and the last one's output is the items done.
  const events = raw.body.split('\n\n').filter((e) => e.includes('data: ')).map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)));
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  const done = events.filter((e) => e.type === 'response.output_item.done');
  expect(done.map((e) => e.output_index)).toEqual(done.map((_, i) => i));
  expect(events.at(-1)).toMatchObject({ type: expect.stringMatching(/^response\.(completed|incomplete)$/), response: { id: response.id, output: done.map((e) => e.item) } });
}

async function readByCompletionsSdk(request: any, raw: RawReply) {
  const sdk = new OpenAI({ ...replaying(raw), baseURL: `${gw.url}/v1` });
  if (request.stream !== true) return expect((await sdk.completions.create(request)).object).toBe('text_completion');
  // The SDK keeps no helper for these streams: each event read, an error event thrown.
  const stream = await sdk.completions.create({ ...request, stream: true } as OpenAI.CompletionCreateParamsStreaming);
  for await (const event of stream) expect(event.object).toBe('text_completion');
}

async function readByChatSdk(request: any, raw: RawReply) {
  const sdk = new OpenAI({ ...replaying(raw), baseURL: `${gw.url}/v1` });
  const completion = request.stream === true ? await sdk.chat.completions.stream(request).finalChatCompletion() : await sdk.chat.completions.create(request);
  expect(completion.object).toBe('chat.completion');
}

const RUNS = 1500;

/** The prompts a request carries: a text completion may send several, each paid for once. */
const promptsOf = (request: object) => ('prompt' in request && Array.isArray(request.prompt) && typeof request.prompt[0] !== 'number' ? request.prompt.length : 1);

describe.each([
  { path: '/v1/chat/completions', body: chatBody, headers: {}, readBySdk: readByChatSdk },
  { path: '/v1/completions', body: completionsBody, headers: {}, readBySdk: readByCompletionsSdk },
  { path: '/v1/messages', body: messagesBody, headers: { 'anthropic-version': '2023-06-01' }, readBySdk: readByMessagesSdk },
  { path: '/v1/responses', body: responsesBody, headers: {}, readBySdk: readByOpenAiSdk },
])('$path: generated requests, answered with what a model might write', ({ path, body, headers, readBySdk }) => {
  it("get a 200 the API's official SDK reads, whole or streamed, or a 4xx in the API's error shape that calls no upstream and costs nothing", async () => {
    let served = 0;
    await fc.assert(
      fc.asyncProperty(body, reply, async (request, modelReply) => {
        nextReply = modelReply;
        invalidUpstreamRequests = [];
        const calls = upstreamCalls();
        const before = await settledBalance();
        const res = await post(path, JSON.stringify(request), { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}`, ...(headers as Record<string, string>) });
        expect(res.status, `${JSON.stringify(request)}\n${JSON.stringify(modelReply)}\n${res.body}`).toBeLessThan(500);
        expect(invalidUpstreamRequests, invalidUpstreamRequests.join('\n')).toEqual([]);
        if (res.status === 200) {
          served++;
          // Read as it was sent: a value JSON cannot carry (Infinity, NaN) went as null, where the SDK, which streams
          // for any truthy `stream`, would have taken `stream: Infinity` for a stream.
          await readBySdk(JSON.parse(JSON.stringify(request)), res);
          // Every upstream reply's usage is 3 prompt tokens and 1 completion token, at modelEntry's prices of 1 and 2
          // micro-units: each prompt is paid once, and where the upstream takes no n each of n replies is a call of its own.
          expect(before.granted - (await settledBalance()).granted).toBe(3 * promptsOf(request) + 2 * (upstreamCalls() - calls));
          return;
        }
        expect(JSON.parse(res.body).error.type).toBeTypeOf('string');
        expect(upstreamCalls(), `${res.status} ${res.body}`).toBe(calls);
        expect((await readBalance(gw.redis.client, gw.account))!.granted).toBe(before.granted);
      }),
      { numRuns: RUNS },
    );
    // Most requests are valid, so that the mapping and the renderers get the model's replies, not validation alone.
    expect(served).toBeGreaterThan(RUNS / 5);
  }, 120_000);
});

describe.each([
  { endpoint: '/v1/chat/completions' as const, body: chatBody, readBySdk: readByChatSdk },
  { endpoint: '/v1/completions' as const, body: completionsBody, readBySdk: readByCompletionsSdk },
  { endpoint: '/v1/responses' as const, body: responsesBody, readBySdk: readByOpenAiSdk },
])("OpenAI's Batch API on $endpoint: generated lines, answered with what a model might write", ({ endpoint, body, readBySdk }) => {
  it('answers every line once, in the output file (a reply the SDK reads) or the error file, and charges what its usage events say', async () => {
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.apiKey, maxRetries: 0 });
    await fc.assert(
      fc.asyncProperty(fc.array(body as fc.Arbitrary<object>, { minLength: 1, maxLength: 8 }), reply, async (requests, modelReply) => {
        nextReply = modelReply;
        invalidUpstreamRequests = [];
        const before = await settledBalance();
        const eventsBefore = (await usageEventsOf(gw.redis.client, gw.account)).length;
        const lines = requests.map((request, i) => JSON.stringify({ custom_id: `line-${i}`, method: 'POST', url: endpoint, body: request }));
        const file = await sdk.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'input.jsonl'), purpose: 'batch' });
        const created = await sdk.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
        let batch = created;
        await until(async () => ['completed', 'failed', 'expired', 'cancelled'].includes((batch = await sdk.batches.retrieve(created.id)).status), 20_000);
        // As OpenAI's does, a batch whose lines name a model there is none of fails whole, before any line runs.
        const modelsKnown = requests.every((r) => DIALECT_KINDS.includes((r as { model: unknown }).model as string));
        expect(batch.status).toBe(modelsKnown ? 'completed' : 'failed');
        if (!modelsKnown) {
          expect(batch.errors?.data?.[0]).toMatchObject({ code: expect.any(String), line: expect.any(Number) });
          expect((await settledBalance()).granted).toBe(before.granted);
          return;
        }
        expect(invalidUpstreamRequests, invalidUpstreamRequests.join('\n')).toEqual([]);
        const linesOf = async (id: string | null | undefined) => (id ? (await (await sdk.files.content(id)).text()).trim().split('\n').map((l) => JSON.parse(l)) : []);
        const [output, errors] = await Promise.all([linesOf(batch.output_file_id), linesOf(batch.error_file_id)]);
        expect([...output, ...errors].map((l) => l.custom_id).sort()).toEqual(requests.map((_, i) => `line-${i}`).sort());
        for (const line of output) {
          const request = requests[Number(line.custom_id.slice('line-'.length))] as Record<string, unknown>;
          await readBySdk({ ...request, stream: false }, { status: 200, contentType: 'application/json', body: JSON.stringify(line.response.body) });
        }
        for (const line of errors) expect(line.response?.status_code ?? 400, JSON.stringify(line)).toBeLessThan(500);
        // Each line served is charged once, as its usage event says; nothing stays held.
        const after = await settledBalance();
        const charged = (await usageEventsOf(gw.redis.client, gw.account)).slice(eventsBefore).reduce((sum, e) => sum + e.charged, 0);
        expect(before.granted - after.granted).toBe(charged);
      }),
      { numRuns: 20 },
    );
  }, 120_000);
});

describe("Anthropic's Message Batches: generated requests, answered with what a model might write", () => {
  it('answers every request once, each result one the SDK reads, and charges what the usage events say', async () => {
    const sdk = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
    await fc.assert(
      fc.asyncProperty(fc.array(messagesBody, { minLength: 1, maxLength: 8 }), reply, async (params, modelReply) => {
        nextReply = modelReply;
        invalidUpstreamRequests = [];
        const before = await settledBalance();
        const eventsBefore = (await usageEventsOf(gw.redis.client, gw.account)).length;
        const requests = params.map((p, i) => ({ custom_id: `req-${i}`, params: p as Anthropic.MessageCreateParamsNonStreaming }));
        const created = await sdk.messages.batches.create({ requests }).catch((err: unknown) => err);
        // Requests the API refuses whole (one that names no model, say) are a 4xx in Anthropic's shape, uncharged.
        if (created instanceof Anthropic.APIError) {
          expect(created.status).toBeLessThan(500);
          expect((await settledBalance()).granted).toBe(before.granted);
          return;
        }
        const id = (created as Anthropic.Messages.Batches.MessageBatch).id;
        await until(async () => (await sdk.messages.batches.retrieve(id)).processing_status === 'ended', 20_000);
        expect(invalidUpstreamRequests, invalidUpstreamRequests.join('\n')).toEqual([]);
        const results: Anthropic.Messages.Batches.MessageBatchIndividualResponse[] = [];
        for await (const r of await sdk.messages.batches.results(id)) results.push(r);
        expect(results.map((r) => r.custom_id).sort()).toEqual(requests.map((r) => r.custom_id).sort());
        for (const r of results) {
          if (r.result.type === 'succeeded') expect(r.result.message.type).toBe('message');
          else expect(r.result.type, JSON.stringify(r)).toBe('errored');
        }
        const after = await settledBalance();
        const charged = (await usageEventsOf(gw.redis.client, gw.account)).slice(eventsBefore).reduce((sum, e) => sum + e.charged, 0);
        expect(before.granted - after.granted).toBe(charged);
      }),
      { numRuns: 20 },
    );
  }, 120_000);
});
