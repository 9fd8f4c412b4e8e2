// Anthropic's Messages API on the same base URL, keys and credit, driven by
// the official `@anthropic-ai/sdk` against scripted vLLM, SGLang and
// llama.cpp upstreams: whole and streamed text, thinking, a tool round trip,
// count_tokens, Anthropic's typed errors, the money, aliases.
import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { callingTool, chunk, completionBody, greeting, replyJson, sleep, until, writeEvents, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, withGatewayOn, type TestGateway } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';

const model = (kind: string) => (urls: string[]) => ({
  models: [modelEntry('coder', urls.map((url) => ({ kind, url, upstreamModel: 'served-name' })), { supports: { tools: true }, contextWindow: 16_384, aliases: ['claude-*-haiku-*', 'gpt-4o'] })],
});

const anthropic = (gw: TestGateway, apiKey = gw.apiKey) => new Anthropic({ baseURL: gw.url, apiKey, maxRetries: 0 });

const weatherTool = { name: 'get_weather', description: 'The weather in a city', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] } };

describe.each(['vllm', 'sglang', 'llamacpp'])('POST /v1/messages on %s', (kind) => {
  it('answers messages.create with a message, usage as Anthropic counts it, and maps the request onto chat', async () => {
    await withGatewayOn([greeting()], model(kind), async (gw, [up]) => {
      const reply = await anthropic(gw).messages.create({
        model: 'coder',
        max_tokens: 20_000,
        system: [{ type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.328.593; cc_entrypoint=sdk-cli;' }, { type: 'text', text: 'You are a coding agent.', cache_control: { type: 'ephemeral' } }],
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] },
          { role: 'assistant', content: [{ type: 'thinking', thinking: 'earlier thoughts', signature: 'sig' }, { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } as never, { type: 'text', text: 'Hello.' }] },
          { role: 'user', content: 'say hi' },
        ],
        stop_sequences: ['###'],
        // Sampling fields older clients send (this SDK's types no longer list them).
        ...({ top_p: 0.5 } as object),
        metadata: { user_id: '{"session_id":"s-1"}' },
      });
      expect(reply).toMatchObject({
        type: 'message', role: 'assistant', model: 'coder', stop_reason: 'end_turn', stop_sequence: null,
        content: [{ type: 'text', text: 'Hello there' }],
        usage: { input_tokens: 36, cache_read_input_tokens: 64, cache_creation_input_tokens: 0, output_tokens: 5 },
      });
      expect(reply.id).toMatch(/^msg_/);
      const sent = up.received[0].body;
      expect(sent.model).toBe('served-name');
      expect(sent.messages).toEqual([
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'Hello.' },
        { role: 'user', content: 'say hi' },
      ]);
      expect(sent.stop).toEqual(['###']);
      expect(sent.top_p).toBe(0.5);
      // 20,000 does not fit beside the prompt in a 16,384-token window: lowered to the room left.
      expect(sent.max_tokens).toBeLessThan(16_384);
      expect(sent.max_tokens).toBeGreaterThan(16_384 - 100);
      await until(async () => (await usageEventsOf(gw.redis.client, gw.account)).length === 1);
      expect((await usageEventsOf(gw.redis.client, gw.account))[0]).toMatchObject({ api: 'messages', model: 'coder', user: '{"session_id":"s-1"}', replyId: reply.id, outcome: 'complete' });
    });
  });

  it('streams messages.stream as Anthropic events: thinking with its signature, then text, then the stop reason and usage', async () => {
    await withGatewayOn([greeting('Let me think.')], model(kind), async (gw) => {
      const stream = anthropic(gw).messages.stream({ model: 'coder', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], thinking: { type: 'enabled', budget_tokens: 50 } });
      const types: string[] = [];
      stream.on('streamEvent', (e) => types.push(e.type === 'content_block_delta' ? `${e.type}:${e.delta.type}` : e.type));
      const final = await stream.finalMessage();
      expect(final.content).toMatchObject([
        { type: 'thinking', thinking: 'Let me think.', signature: expect.any(String) },
        { type: 'text', text: 'Hello there' },
      ]);
      expect(final.stop_reason).toBe('end_turn');
      expect(final.usage).toMatchObject({ input_tokens: 36, cache_read_input_tokens: 64, output_tokens: 5 });
      expect(types).toEqual([
        'message_start',
        'content_block_start', 'content_block_delta:thinking_delta', 'content_block_delta:signature_delta', 'content_block_stop',
        'content_block_start', 'content_block_delta:text_delta', 'content_block_delta:text_delta', 'content_block_stop',
        'message_delta', 'message_stop',
      ]);
    });
  });

  it('carries a tool round trip: the upstream calls a tool, the client sends tool_result, the upstream receives the tool message', async () => {
    await withGatewayOn([callingTool('get_weather')], model(kind), async (gw, [up]) => {
      const client = anthropic(gw);
      const ask = { model: 'coder', max_tokens: 100, tools: [weatherTool], tool_choice: { type: 'any' as const } };
      const first = await client.messages.stream({ ...ask, messages: [{ role: 'user', content: 'Weather in Paris?' }] }).finalMessage();
      expect(first.stop_reason).toBe('tool_use');
      const toolUse = first.content.find((b) => b.type === 'tool_use')!;
      expect(toolUse).toMatchObject({ type: 'tool_use', name: 'get_weather', input: { city: 'Paris' } });
      expect(toolUse.id).toMatch(/^toolu_/);
      expect(up.received[0].body.tools).toEqual([{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weatherTool.input_schema } }]);
      expect(up.received[0].body.tool_choice).toBe('required');

      const second = await client.messages.create({
        ...ask,
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: [{ type: 'text', text: 'sunny' }] }, { type: 'text', text: 'Thanks' }] },
        ],
      });
      expect(second.content).toEqual([{ type: 'text', text: 'It is sunny.' }]);
      expect(up.received[1].body.messages.slice(1)).toEqual([
        { role: 'assistant', content: null, tool_calls: [{ id: toolUse.id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: toolUse.id, content: 'sunny' },
        { role: 'user', content: 'Thanks' },
      ]);
      // The whole reply's tool_use too.
      const whole = await client.messages.create({ ...ask, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
      expect(whole.content).toEqual([{ type: 'tool_use', id: expect.stringMatching(/^toolu_/), name: 'get_weather', input: { city: 'Paris' } }]);
    });
  });
});

describe('the Messages API and its clients', () => {
  it("sends a streamed call's input whole, once its arguments are in, as the whole reply's; arguments a model wrote that are not JSON come as the whole reply has them", async () => {
    const brokenArguments: Script = (req, res) => {
      const call = { index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: 'city=' } };
      if (!req.body.stream) return replyJson(res, { ...completionBody('', { prompt_tokens: 5, completion_tokens: 3 }), choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ ...call, function: { ...call.function, arguments: 'city=Paris' } }] }, finish_reason: 'tool_calls' }] });
      writeEvents(res, [chunk({ tool_calls: [call] }), chunk({ tool_calls: [{ index: 0, function: { arguments: 'Paris' } }] }), chunk({}, 'tool_calls'), { ...chunk({}), choices: [], usage: { prompt_tokens: 5, completion_tokens: 3 } }]);
    };
    await withGatewayOn([callingTool('get_weather'), brokenArguments], ([good, broken]) => ({ models: [modelEntry('good', [{ kind: 'vllm', url: good }], { supports: { tools: true } }), modelEntry('broken', [{ kind: 'vllm', url: broken }], { supports: { tools: true } })] }), async (gw) => {
      const ask = { max_tokens: 100, tools: [weatherTool], messages: [{ role: 'user' as const, content: 'Weather in Paris?' }] };
      const raw = await (await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': gw.apiKey }, body: JSON.stringify({ ...ask, model: 'good', stream: true }) })).text();
      // The upstream sent the arguments in two pieces; they go in one, with the call's block still opening first.
      expect([...raw.matchAll(/"partial_json":("(?:[^"\\]|\\.)*")/g)].map(([, literal]) => JSON.parse(literal))).toEqual(['{"city":"Paris"}']);
      for (const model of ['good', 'broken']) {
        const streamed = await anthropic(gw).messages.stream({ ...ask, model }).finalMessage();
        const whole = await anthropic(gw).messages.create({ ...ask, model });
        const input = model === 'good' ? { city: 'Paris' } : { arguments: 'city=Paris' };
        expect(streamed.content).toEqual([{ type: 'tool_use', id: expect.stringMatching(/^toolu_/), name: 'get_weather', input }]);
        expect(whole.content).toEqual(streamed.content);
      }
    });
  });

  it('counts tokens without charging, and lists models in Anthropic\'s shape to an Anthropic client', async () => {
    await withGatewayOn([greeting()], model('vllm'), async (gw, [up]) => {
      const before = await readBalance(gw.redis.client, gw.account);
      const counted = await anthropic(gw).messages.countTokens({ model: 'coder', messages: [{ role: 'user', content: 'a'.repeat(300) }] });
      // No tokenizer here: an estimate from the text, about 3 bytes a token.
      expect(counted.input_tokens).toBeGreaterThanOrEqual(100);
      expect(counted.input_tokens).toBeLessThan(120);
      expect(up.received.filter((r) => r.path.endsWith('/chat/completions'))).toHaveLength(0);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
      const models = await anthropic(gw).models.list();
      expect(models.data).toEqual([{ type: 'model', id: 'coder', display_name: 'coder', created_at: expect.any(String), max_input_tokens: 16_384, max_tokens: 16_384 }]);
    });
  });

  it("counts tokens with the upstream's own count where it has one (vLLM's /tokenize), and estimates where it cannot answer", async () => {
    const counting: Script = (req, res) => (req.path === '/tokenize' ? replyJson(res, { count: 1234, max_model_len: 16_384, tokens: [] }) : greeting()(req, res));
    await withGatewayOn([counting], model('vllm'), async (gw, [up]) => {
      const ask = { model: 'coder', system: 'x-anthropic-billing-header: cc_version=1;', messages: [{ role: 'user' as const, content: 'count me' }] };
      expect(await anthropic(gw).messages.countTokens(ask)).toEqual({ input_tokens: 1234 });
      expect(up.received.at(-1)).toMatchObject({ path: '/tokenize', body: { model: 'served-name', messages: [{ role: 'user', content: 'count me' }] } });
      up.setScript((_req, res) => replyJson(res, { error: 'not here' }, 404));
      const estimated = await anthropic(gw).messages.countTokens(ask);
      expect(estimated.input_tokens).toBeGreaterThan(0);
      expect(estimated.input_tokens).toBeLessThan(20);
    });
  });

  it("routes by Claude Code's session (metadata.user_id's session_id): sessions with one system prompt each keep their own endpoint", async () => {
    const scripts = ['a', 'b', 'c', 'd'].map((name): Script => (req, res) => (req.path.endsWith('/chat/completions') ? replyJson(res, completionBody(name, { prompt_tokens: 3, completion_tokens: 1 })) : replyJson(res, { data: [] })));
    await withGatewayOn(scripts, (urls) => ({ models: [modelEntry('coder', urls.map((url) => ({ kind: 'vllm', url })))] }), async (gw) => {
      const system = 'You are Claude Code. '.repeat(80);
      const homes = new Map<number, Set<string>>();
      for (let turn = 0; turn < 3; turn++) {
        for (let session = 0; session < 8; session++) {
          const user_id = JSON.stringify({ device_id: 'd', account_uuid: '', session_id: `s-${session}` });
          const reply = await anthropic(gw).messages.create({ model: 'coder', max_tokens: 10, system, metadata: { user_id }, messages: [{ role: 'user', content: `turn ${turn}` }] });
          homes.set(session, (homes.get(session) ?? new Set()).add((reply.content[0] as { text: string }).text));
        }
      }
      for (const served of homes.values()) expect(served.size).toBe(1);
      const perEndpoint = new Map<string, number>();
      for (const served of homes.values()) perEndpoint.set([...served][0], (perEndpoint.get([...served][0]) ?? 0) + 1);
      expect([...perEndpoint.values()]).toEqual([2, 2, 2, 2]);
    });
  });

  it("answers every refusal with Anthropic's error body and status, which the SDK types", async () => {
    await withGatewayOn([greeting()], model('vllm'), async (gw) => {
      const ok = { model: 'coder', max_tokens: 10, messages: [{ role: 'user' as const, content: 'hi' }] };
      await expect(anthropic(gw, 'sk-wrong').messages.create(ok)).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
      await expect(anthropic(gw).messages.create({ ...ok, model: 'nope' })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
      const missing = await fetch(`${gw.url}/v1/messages?beta=true`, { method: 'POST', headers: { 'x-api-key': gw.apiKey, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'coder', messages: ok.messages }) });
      expect(missing.status).toBe(400);
      expect(missing.headers.get('request-id')).toBe(missing.headers.get('x-request-id'));
      expect(await missing.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: "Missing required parameter: 'max_tokens'." } });
      const image = anthropic(gw).messages.create({ ...ok, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] });
      await expect(image).rejects.toMatchObject({ status: 400, error: { error: { type: 'invalid_request_error', message: expect.stringContaining('messages.0.content.0: image blocks are not supported') } } });
      const noId = anthropic(gw).messages.create({ ...ok, messages: [{ role: 'assistant', content: [{ type: 'tool_use', name: 'f', input: {} } as never] }] });
      await expect(noId).rejects.toMatchObject({ status: 400, error: { error: { type: 'invalid_request_error' } } });
      const broke = await makeAccount(gw.redis, 0);
      await expect(anthropic(gw, broke.key).messages.create(ok)).rejects.toMatchObject({ status: 402, error: { type: 'error', error: { type: 'billing_error' } } });
    });
  });

  it('ends a stream the upstream breaks off with an error event, unpaid; a complete one costs its usage with cached tokens at the cache price', async () => {
    const breaking: Script = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify(chunk({ content: 'Hel' }))}\n\ndata: {"error": {"message": "engine died"}}\n\n`);
    };
    await withGatewayOn([breaking], model('vllm'), async (gw, [up]) => {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      const stream = anthropic(gw).messages.stream({ model: 'coder', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
      await expect(stream.finalMessage()).rejects.toThrow(/stopped answering/);
      await sleep(100);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);

      up.setScript(greeting());
      await anthropic(gw).messages.stream({ model: 'coder', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
      // 36 uncached × 1 + 64 cached × 0.1 + 5 output × 2 micro-units = 52.4, rounded up once.
      await until(async () => (await readBalance(gw.redis.client, gw.account))!.granted === before.granted - 53);
    });
  });

  it('says which stop sequence ended the reply where the upstream says (vLLM, SGLang), whole and streamed; chat clients are not told', async () => {
    for (const [kind, field] of [['vllm', 'stop_reason'], ['sglang', 'matched_stop']]) {
      const stopped: Script = (req, res) => {
        if (!req.body.stream) {
          const body = completionBody('Done', { prompt_tokens: 3, completion_tokens: 1 });
          (body.choices[0] as Record<string, unknown>)[field] = '###';
          return replyJson(res, body);
        }
        writeEvents(res, [chunk({ role: 'assistant', content: 'Done' }), { ...chunk({}, 'stop'), choices: [{ index: 0, delta: {}, finish_reason: 'stop', [field]: '###' }] }, { ...chunk({}), choices: [], usage: { prompt_tokens: 3, completion_tokens: 1 } }]);
      };
      await withGatewayOn([stopped], model(kind), async (gw) => {
        const ask = { model: 'coder', max_tokens: 10, stop_sequences: ['###'], messages: [{ role: 'user' as const, content: 'hi' }] };
        expect(await anthropic(gw).messages.create(ask)).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: '###' });
        expect(await anthropic(gw).messages.stream(ask).finalMessage()).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: '###' });
        expect(await anthropic(gw).messages.create({ ...ask, stop_sequences: ['END'] })).toMatchObject({ stop_reason: 'end_turn', stop_sequence: null });
        const chat = await postChat(gw, { model: 'coder', messages: ask.messages, stop: ['###'] });
        expect((await chat.json()).choices[0]).toEqual({ index: 0, message: { role: 'assistant', content: 'Done' }, logprobs: null, finish_reason: 'stop' });
        const streamed = await (await postChat(gw, { model: 'coder', messages: ask.messages, stop: ['###'], stream: true })).text();
        expect(streamed).not.toContain('###');
      });
    }
  });

  it('serves the names clients assume through aliases, and records the model that served', async () => {
    await withGatewayOn([greeting()], model('vllm'), async (gw) => {
      const reply = await anthropic(gw).messages.create({ model: 'claude-3-5-haiku-20241022', max_tokens: 10, messages: [{ role: 'user', content: 'title?' }] });
      expect(reply.model).toBe('claude-3-5-haiku-20241022');
      const chat = await gw.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
      expect(chat.choices[0].message.content).toBe('Hello there');
      await expect(anthropic(gw).messages.create({ model: 'claude-opus-4', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
      await until(async () => (await usageEventsOf(gw.redis.client, gw.account)).length === 2);
      expect((await usageEventsOf(gw.redis.client, gw.account)).map((e) => [e.api, e.model])).toEqual([['messages', 'coder'], ['chat', 'coder']]);
      expect((await gw.client.models.list()).data[0]).toMatchObject({ id: 'coder', aliases: ['claude-*-haiku-*', 'gpt-4o'] });
    });
  });
});
