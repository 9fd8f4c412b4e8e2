// OpenAI's Responses API on the same base URL, keys and credit, driven by the
// official `openai` client against scripted vLLM, SGLang and llama.cpp
// upstreams: whole and streamed text, reasoning, a function-call round trip
// (namespaced functions included), statelessness, the money.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ensureDefaultModel } from '../../src/engine/model-maker.js';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { AGENT_USAGE as usage, callingTool, chunk, greeting, sleep, until, writeEvents, type Script } from '../support/fake-upstream.js';
import { modelEntry, withGatewayOn } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';

const model = (kind: string) => (urls: string[]) => ({
  models: [modelEntry('coder', urls.map((url) => ({ kind, url, upstreamModel: 'served-name' })), { supports: { tools: true, jsonOutput: true }, contextWindow: 16_384 })],
});

const weather = { type: 'function' as const, name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false };

describe.each(['vllm', 'sglang', 'llamacpp'])('POST /v1/responses on %s', (kind) => {
  it('answers responses.create with a response, its usage and the settings echoed, and maps the request onto chat', async () => {
    await withGatewayOn([greeting('Thinking.')], model(kind), async (gw, [up]) => {
      const reply = await gw.client.responses.create({
        model: 'coder',
        instructions: 'Be brief.',
        input: [
          { role: 'developer', content: [{ type: 'input_text', text: 'You are a coding agent.' }] },
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
          { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'opaque' },
          { type: 'web_search_call', id: 'ws_1', status: 'completed', action: { type: 'search', query: 'q' } } as never,
          { role: 'assistant', content: 'Hello.' },
          { role: 'user', content: 'say hi' },
        ],
        max_output_tokens: 50,
        temperature: 0.3,
        store: false,
        include: ['reasoning.encrypted_content'],
        prompt_cache_key: 'session-1',
        reasoning: { effort: 'low', summary: 'auto' },
        metadata: { team: 'search' },
        safety_identifier: 'user-7',
        tools: [{ type: 'web_search' } as never],
      });
      expect(reply).toMatchObject({
        object: 'response', status: 'completed', model: 'coder', incomplete_details: null, metadata: { team: 'search' }, instructions: 'Be brief.', max_output_tokens: 50, temperature: 0.3,
        output: [
          { type: 'reasoning', summary: [{ type: 'summary_text', text: 'Thinking.' }] },
          { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hello there', annotations: [] }] },
        ],
        usage: { input_tokens: 100, input_tokens_details: { cached_tokens: 64 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 2 }, total_tokens: 105 },
      });
      expect(reply.id).toMatch(/^resp_/);
      expect(reply.output_text).toBe('Hello there');
      const sent = up.received.find((r) => r.path.endsWith('/chat/completions'))!.body;
      expect(sent.messages).toEqual([
        { role: 'system', content: 'Be brief.' },
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'Hello.' },
        { role: 'user', content: 'say hi' },
      ]);
      expect(sent).toMatchObject({ model: 'served-name', max_tokens: 50, temperature: 0.3 });
      expect(sent.tools).toBeUndefined();
      await until(async () => (await usageEventsOf(gw.redis.client, gw.account)).length === 1);
      expect((await usageEventsOf(gw.redis.client, gw.account))[0]).toMatchObject({ api: 'responses', user: 'user-7', replyId: reply.id, outcome: 'complete' });
    });
  });

  it('streams responses.stream as typed events with increasing sequence numbers, ending in response.completed', async () => {
    await withGatewayOn([greeting('Thinking.')], model(kind), async (gw) => {
      const stream = gw.client.responses.stream({ model: 'coder', input: 'hi' });
      const events: { type: string; sequence_number: number }[] = [];
      for await (const e of stream) events.push(e);
      const final = await stream.finalResponse();
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
      expect(events.map((e) => e.type)).toEqual([
        'response.created', 'response.in_progress',
        'response.output_item.added', 'response.reasoning_summary_part.added', 'response.reasoning_summary_text.delta',
        'response.reasoning_summary_text.done', 'response.reasoning_summary_part.done', 'response.output_item.done',
        'response.output_item.added', 'response.content_part.added', 'response.output_text.delta', 'response.output_text.delta',
        'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
        'response.completed',
      ]);
      expect(final.output_text).toBe('Hello there');
      expect(final.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
      expect(final.usage).toMatchObject({ input_tokens: 100, output_tokens: 5 });
    });
  });

  it('carries a function-call round trip, namespaced functions under their namespace', async () => {
    await withGatewayOn([callingTool('weather__get_weather')], model(kind), async (gw, [up]) => {
      const tools = [{ type: 'namespace', name: 'weather', description: 'Weather tools', tools: [weather] } as never, weather];
      const stream = gw.client.responses.stream({ model: 'coder', input: 'Weather in Paris?', tools, tool_choice: 'auto', parallel_tool_calls: true });
      const first = await stream.finalResponse();
      const call = first.output.find((o) => o.type === 'function_call')!;
      expect(call).toMatchObject({ type: 'function_call', call_id: 'call_1', name: 'get_weather', namespace: 'weather', arguments: '{"city":"Paris"}', status: 'completed' });
      const offered = up.received[0].body.tools.map((t: { function: { name: string } }) => t.function.name);
      expect(offered).toEqual(['weather__get_weather', 'get_weather']);

      const second = await gw.client.responses.create({
        model: 'coder',
        tools,
        input: [
          { role: 'user', content: 'Weather in Paris?' },
          call as never,
          { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
        ],
      });
      expect(second.output_text).toBe('It is sunny.');
      expect(up.received[1].body.messages).toEqual([
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather__get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      ]);
    });
  });
});

describe('the Responses API, its errors', () => {
  it("names its own prompt field, input, when the prompt is over the window", async () => {
    const tokenizer = ensureDefaultModel(join(process.cwd(), '.parley-test', 'tokenizer.gguf'));
    const small = (urls: string[]) => ({ models: [modelEntry('coder', urls.map((url) => ({ kind: 'vllm', url })), { contextWindow: 64, tokenizer: { gguf: tokenizer } })] });
    await withGatewayOn([greeting('never')], small, async (gw) => {
      const err = await gw.client.responses.create({ model: 'coder', input: 'word '.repeat(200) }).catch((e) => e);
      expect(err).toMatchObject({ status: 400, code: 'context_length_exceeded', param: 'input' });
    });
  });
});

describe('the Responses API, stateless', () => {
  it('refuses previous_response_id, conversation and item references with a 400 that says Parley keeps no state, and stored responses are a 404', async () => {
    await withGatewayOn([greeting()], model('vllm'), async (gw, [up]) => {
      await expect(gw.client.responses.create({ model: 'coder', input: 'hi', previous_response_id: 'resp_1' })).rejects.toMatchObject({ status: 400, param: 'previous_response_id', message: expect.stringContaining('keeps no state') });
      await expect(gw.client.responses.create({ model: 'coder', input: 'hi', conversation: 'conv_1' })).rejects.toMatchObject({ status: 400, param: 'conversation' });
      await expect(gw.client.responses.create({ model: 'coder', input: [{ type: 'item_reference', id: 'msg_1' }] })).rejects.toMatchObject({ status: 400, param: 'input[0]', message: expect.stringContaining('send the item itself') });
      await expect(gw.client.responses.create({ model: 'coder', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png', detail: 'auto' }] }] })).rejects.toMatchObject({ status: 400, param: 'input[0].content[0]' });
      await expect(gw.client.responses.create({ model: 'coder', input: [{ type: 'function_call', name: 'f', arguments: '{}' } as never] })).rejects.toMatchObject({ status: 400, message: expect.stringContaining('needs call_id') });
      await expect(gw.client.responses.retrieve('resp_1')).rejects.toMatchObject({ status: 404, message: expect.stringContaining('keeps no state') });
      await expect(gw.client.responses.delete('resp_1')).rejects.toMatchObject({ status: 404 });
      expect(up.received.filter((r) => r.path.endsWith('/chat/completions'))).toHaveLength(0);
    });
  });

  it('says incomplete when the reply was cut at max_output_tokens, whole and streamed', async () => {
    await withGatewayOn([greeting(undefined, 'length')], model('vllm'), async (gw) => {
      const whole = await gw.client.responses.create({ model: 'coder', input: 'hi', max_output_tokens: 16 });
      expect(whole).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
      const types: string[] = [];
      for await (const e of gw.client.responses.stream({ model: 'coder', input: 'hi', max_output_tokens: 16 })) types.push(e.type);
      expect(types.at(-1)).toBe('response.incomplete');
    });
  });

  it('sends JSON-schema output on as response_format where the model takes it', async () => {
    await withGatewayOn([greeting()], model('vllm'), async (gw, [up]) => {
      const schema = { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false };
      await gw.client.responses.create({ model: 'coder', input: 'hi', text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } } });
      expect(up.received[0].body.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } });
    });
  });

  it('repeats the text in the .done events and response.completed exactly, quotes, newlines and emoji included', async () => {
    const pieces = ['say "hi"', '\n\ttab \\ ', '😀', ' end'];
    const upstream: Script = (_req, res) => writeEvents(res, [chunk({ role: 'assistant', content: '' }), ...pieces.map((p) => chunk({ content: p })), chunk({}, 'stop'), { ...chunk({}), choices: [], usage }]);
    for (const kind of ['vllm', 'llamacpp']) {
      await withGatewayOn([upstream], model(kind), async (gw) => {
        const stream = gw.client.responses.stream({ model: 'coder', input: 'hi' });
        const done: string[] = [];
        for await (const e of stream) {
          if (e.type === 'response.output_text.done') done.push(e.text);
          if (e.type === 'response.content_part.done' && e.part.type === 'output_text') done.push(e.part.text);
          if (e.type === 'response.output_item.done' && e.item.type === 'message') done.push((e.item.content[0] as { text: string }).text);
        }
        expect(done).toEqual([pieces.join(''), pieces.join(''), pieces.join('')]);
        expect((await stream.finalResponse()).output_text).toBe(pieces.join(''));
      });
    }
  });

  it('ends a stream the upstream breaks off with response.failed, unpaid; a complete one costs its usage', async () => {
    const breaking: Script = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify(chunk({ content: 'Hel' }))}\n\ndata: {"error": {"message": "engine died"}}\n\n`);
    };
    await withGatewayOn([breaking], model('vllm'), async (gw, [up]) => {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      const types: string[] = [];
      for await (const e of gw.client.responses.stream({ model: 'coder', input: 'hi' })) types.push(e.type);
      expect(types.at(-1)).toBe('response.failed');
      await sleep(100);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);

      up.setScript(greeting());
      await gw.client.responses.stream({ model: 'coder', input: 'hi' }).finalResponse();
      // 36 uncached × 1 + 64 cached × 0.1 + 5 output × 2 micro-units = 52.4, rounded up once.
      await until(async () => (await readBalance(gw.redis.client, gw.account))!.granted === before.granted - 53);
    });
  });
});
