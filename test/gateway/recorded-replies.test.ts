// What each upstream kind really writes (test/fixtures/upstream/), replayed
// through a scripted upstream: the exact bytes the client gets from Parley.
// One format whatever the dialect: reasoning as `reasoning_content`, no
// chunk whose delta says nothing, no null field OpenAI leaves out, a tool
// call's id, type and name on its first piece only, logprobs in OpenAI's shape.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { Script } from '../support/fake-upstream.js';
import { modelEntry, postChat, withGatewayOn } from '../support/gateway.js';

const fixture = (name: string) => readFileSync(new URL(`../fixtures/upstream/${name}`, import.meta.url), 'utf8');
const messages = [{ role: 'user' as const, content: 'Hello' }];

/** Writes a fixture's bytes as they are, cut in two reads mid-event, as a network would. */
const replaying = (name: string, status = 200): Script => (_req, res) => {
  const bytes = Buffer.from(fixture(name));
  res.writeHead(status, { 'content-type': name.endsWith('.sse') ? 'text/event-stream' : 'application/json' });
  res.write(bytes.subarray(0, 301));
  setTimeout(() => res.end(bytes.subarray(301)), 5);
};

async function replay(kind: string, name: string, stream: boolean, status = 200) {
  return withGatewayOn([replaying(name, status)], ([url]) => ({ models: [modelEntry('m', [{ kind, url }], { supports: { tools: true, jsonOutput: true } })] }), async (gw) => {
    const res = await postChat(gw, { model: 'm', messages, stream, stream_options: stream ? { include_usage: true } : undefined }, { 'x-request-id': 'fixture' });
    return { status: res.status, text: await res.text() };
  });
}

/** Parley's chunks for a reply created at `created`: each `choices` JSON as a `data:` line, usage null (include_usage was set). */
function expectedStream(created: number, choices: string[], usage: string | undefined, end = 'data: [DONE]\n\n'): string {
  const head = `{"id":"chatcmpl-fixture","object":"chat.completion.chunk","created":${created},"model":"m","service_tier":"default","choices":`;
  const opening = '[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]';
  const lines = [opening, ...choices].map((c) => `data: ${head}${c},"usage":null}\n\n`);
  if (usage) lines.push(`data: ${head}[],"usage":${usage}}\n\n`);
  return lines.join('') + end;
}

const createdOf = (text: string) => Number(/"created":(\d+)/.exec(text)![1]);
const piece = (delta: string, finish: string | null = null, logprobs = 'null') => `[{"index":0,"delta":${delta},"logprobs":${logprobs},"finish_reason":${finish === null ? 'null' : `"${finish}"`}}]`;
/** Usage as Parley relays it: the reasoning part of the completion where the upstream said it. */
const usage = (prompt: number, completion: number, cached: number, reasoning?: number) =>
  `{"prompt_tokens":${prompt},"completion_tokens":${completion},"total_tokens":${prompt + completion},"prompt_tokens_details":{"cached_tokens":${cached}}${reasoning === undefined ? '' : `,"completion_tokens_details":{"reasoning_tokens":${reasoning}}`}}`;

const brokeOff = '{"error":{"message":"The model stopped answering before the reply was complete. Nothing was charged for this reply; please retry.","type":"server_error","param":null,"code":null}}';
const llamaLogprobs = (token: string, bytes: number[], logprob: number) =>
  `{"content":[{"token":"${token}","logprob":${logprob},"bytes":[${bytes}],"top_logprobs":[{"token":"${token}","logprob":${logprob},"bytes":[${bytes}]}]}]}`;

describe('recorded streams, as the client gets them', () => {
  const cases: [title: string, kind: string, file: string, choices: string[], usage: string | undefined, end?: string][] = [
    ["vLLM's reasoning, named reasoning_content, and its empty finishing piece left out", 'vllm', 'vllm-reasoning.sse', [
      piece('{"reasoning_content":"The user"}'), piece('{"reasoning_content":" greets me."}'), piece('{"content":"Hello"}'), piece('{"content":"!"}'), piece('{}', 'stop'),
    ], usage(14, 8, 0)],
    ["SGLang's parallel tool calls: no null fields, and each call's id, type and name on its first piece only", 'sglang', 'sglang-parallel-tools.sse', [
      piece('{"tool_calls":[{"index":0,"id":"call_0a1b2c","type":"function","function":{"name":"get_weather","arguments":""}}]}'),
      piece('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\": \\"Paris\\"}"}}]}'),
      piece('{"tool_calls":[{"index":1,"id":"call_3d4e5f","type":"function","function":{"name":"get_weather","arguments":""}}]}'),
      piece('{"tool_calls":[{"index":1,"function":{"arguments":"{\\"city\\": \\"Oslo\\"}"}}]}'),
      piece('{}', 'tool_calls'),
    ], usage(180, 38, 128)],
    ["llama.cpp's logprobs in OpenAI's shape, and its cached tokens from an older build's timings", 'llamacpp', 'llamacpp-logprobs.sse', [
      piece('{"content":"Hi"}', null, llamaLogprobs('Hi', [72, 105], -0.25)),
      piece('{"content":" there"}', null, llamaLogprobs(' there', [32, 116, 104, 101, 114, 101], -1.5)),
      piece('{}', 'stop'),
    ], usage(120, 2, 112)],
    ["DeepSeek's reasoning pieces, without the null content around them", 'deepseek', 'deepseek-reasoning.sse', [
      piece('{"reasoning_content":"Simple"}'), piece('{"reasoning_content":" greeting."}'), piece('{"content":"Hi!"}'), piece('{}', 'stop'),
    ], usage(12, 9, 0, 6)],
    ["OpenAI's opening of empty content and null refusal as one role chunk, its padding dropped and the tier Parley's", 'openai', 'openai-refusal-opening.sse', [
      piece('{"content":"Hello"}'), piece('{}', 'stop'),
    ], usage(1200, 1, 1024, 0)],
    ["an error event mid-stream ends the reply with Parley's error event, not [DONE]", 'vllm', 'vllm-error-ending.sse', [piece('{"content":"Once"}')], undefined, `data: ${brokeOff}\n\n`],
  ];

  it.each(cases)('%s', async (_title, kind, file, choices, u, end) => {
    const { text } = await replay(kind, file, true);
    expect(text).toBe(expectedStream(createdOf(text), choices, u, end));
  });
});

describe('recorded whole replies and errors, as the client gets them', () => {
  const whole = (created: number, message: string, u: string) =>
    `{"id":"chatcmpl-fixture","object":"chat.completion","created":${created},"model":"m","service_tier":"default","choices":[{"index":0,"message":${message},"logprobs":null,"finish_reason":"stop"}],"usage":${u}}`;

  it.each([
    ['deepseek', 'deepseek-reasoning-whole.json', '{"role":"assistant","content":"Hi!","reasoning_content":"Simple greeting."}', usage(12, 9, 0, 6)],
    ['vllm', 'vllm-reasoning-whole.json', '{"role":"assistant","content":"Hello!","reasoning_content":"The user greets me."}', usage(14, 8, 0)],
  ])('%s: the reasoning the reply was charged for, as reasoning_content', async (kind, name, message, u) => {
    const { text } = await replay(kind, name, false);
    expect(text).toBe(whole(createdOf(text), message, u));
  });

  it.each([
    ['vllm', 'vllm-context-error.json', "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."],
    ['llamacpp', 'llamacpp-context-error.json', 'the request exceeds the available context size, try increasing it'],
  ])("%s's context error: a 400 context_length_exceeded", async (kind, name, upstreamMessage) => {
    const { status, text } = await replay(kind, name, false, 400);
    expect(status).toBe(400);
    expect(text).toBe(JSON.stringify({ error: { message: `The prompt plus max_tokens exceed this model's context window (upstream said: ${upstreamMessage}).`, type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } }));
  });
});
