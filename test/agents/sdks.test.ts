// The OpenAI Agents SDK and the AI SDK's OpenAI provider, which call the
// Responses API by default, through Parley in front of a scripted upstream
// that calls a tool on cue; each its pinned and its newest release.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { chunk, completionBody, replyJson, writeEvents, type Script } from '../support/fake-upstream.js';
import { modelEntry, withGatewayOn, type TestGateway } from '../support/gateway.js';
import { eachRelease, sdkReleases } from '../support/sdk-releases.js';
import { usageEventsOf } from '../support/ledger.js';

const usage = { prompt_tokens: 40, completion_tokens: 4, total_tokens: 44 };

/** Calls `get_weather` on the first turn where it is offered, and answers with what the tool said after. */
const weatherUpstream: Script = (req, res) => {
  if (!req.path.endsWith('/chat/completions')) return replyJson(res, { data: [] });
  const result = req.body.messages.find((m: { role: string }) => m.role === 'tool');
  const offered = req.body.tools?.some((t: { function: { name: string } }) => t.function.name === 'get_weather');
  const text = result ? `It is ${result.content} in Paris.` : 'Hello from the upstream';
  if (!result && offered) {
    const call = { index: 0, id: 'call_w', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } };
    if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', tool_calls: [call] }), chunk({}, 'tool_calls'), { ...chunk({}), choices: [], usage }]);
    const body = completionBody('', usage);
    body.choices[0] = { index: 0, message: { role: 'assistant', content: null, tool_calls: [call] } as never, finish_reason: 'tool_calls' };
    return replyJson(res, body);
  }
  if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content: text }), chunk({}, 'stop'), { ...chunk({}), choices: [], usage }]);
  replyJson(res, completionBody(text, usage));
};

/** The API each request of the account came through, from its usage events. */
const apisUsed = async (gw: TestGateway): Promise<string[]> => (await usageEventsOf(gw.redis.client, gw.account)).map((e) => e.api);

const config = ([url]: string[]) => ({ models: [modelEntry('coder', [{ kind: 'vllm', url }], { supports: { tools: true } })] });

describe.each(eachRelease(await sdkReleases()))('%s', (_, sdk) => {
  describe('the OpenAI Agents SDK', () => {
    it('runs an agent whose function tool the upstream calls, and returns the answer that follows', async () => {
      await withGatewayOn([weatherUpstream], config, async (gw, [up]) => {
        const { Agent, OpenAIProvider, Runner, tool } = sdk.agents;
        const getWeather = tool({ name: 'get_weather', description: 'The weather in a city', parameters: z.object({ city: z.string() }), execute: async ({ city }) => (city === 'Paris' ? 'sunny' : 'unknown') });
        const agent = new Agent({ name: 'forecaster', instructions: 'Answer with the weather.', model: 'coder', tools: [getWeather] });
        const provider = new OpenAIProvider({ openAIClient: new sdk.openai.default({ baseURL: `${gw.url}/v1`, apiKey: gw.apiKey, maxRetries: 0 }) as never, useResponses: true });
        const result = await new Runner({ modelProvider: provider, tracingDisabled: true }).run(agent, 'Weather in Paris?');
        expect(result.finalOutput).toBe('It is sunny in Paris.');
        const calls = up.received.filter((r) => r.path.endsWith('/chat/completions'));
        expect(calls).toHaveLength(2);
        expect(calls[1].body.messages.at(-1)).toEqual({ role: 'tool', tool_call_id: 'call_w', content: 'sunny' });
        await expect.poll(() => apisUsed(gw)).toEqual(['responses', 'responses']);
      });
    });
  });

  describe("the AI SDK's OpenAI provider", () => {
    it('answers generateText and streamText through the Responses API', async () => {
      await withGatewayOn([weatherUpstream], config, async (gw, [up]) => {
        const { generateText, streamText } = sdk.ai;
        const openai = sdk.aiOpenAI.createOpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.apiKey });
        const whole = await generateText({ model: openai('coder'), prompt: 'hi' });
        expect(whole.text).toBe('Hello from the upstream');
        expect(whole.usage.inputTokens).toBe(40);
        const streamed = streamText({ model: openai('coder'), prompt: 'hi' });
        expect(await streamed.text).toBe('Hello from the upstream');
        expect((await streamed.usage).outputTokens).toBe(4);
        expect(up.received.filter((r) => r.path.endsWith('/chat/completions'))).toHaveLength(2);
        await expect.poll(() => apisUsed(gw)).toEqual(['responses', 'responses']);
      });
    });
  });
});
