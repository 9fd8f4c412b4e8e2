// OpenAI's further request fields reach the upstream kinds that take them
// and no others; a model's `passThrough` lets engine extras through
// unchanged; anything else stays unknown and goes nowhere. `user` is on
// every usage event, whatever the upstream takes.
import { describe, expect, it } from 'vitest';
import { parseRoutingFile } from '../../src/config.js';
import { completionBody, replyJson, until, type Script } from '../support/fake-upstream.js';
import { modelEntry, postChat, withGatewayOn } from '../support/gateway.js';
import { usageEventsOf } from '../support/ledger.js';

const answer: Script = (_req, res) => replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }));
const EXTRAS = {
  user: 'end-user-42', safety_identifier: 'sid-42', reasoning_effort: 'low', verbosity: 'low', metadata: { team: 'search' }, service_tier: 'flex',
  store: false, prediction: { type: 'content', content: 'draft' }, modalities: ['text'], web_search_options: { search_context_size: 'low' },
  prompt_cache_key: 'tenant-42', prompt_cache_retention: '24h',
};

describe("OpenAI's further request fields", () => {
  it.each([
    // The service tier is Parley's own (it admits and prices by it); an OpenAI upstream bills the operator at its default.
    ['openai', Object.keys(EXTRAS).filter((f) => f !== 'service_tier')],
    ['vllm', ['user', 'reasoning_effort']],
    ['sglang', ['user', 'reasoning_effort']],
    ['llamacpp', []],
    ['deepseek', []],
    ['parley-engine', []],
  ])('reach %s as that kind takes them: %j', async (kind, forwarded) => {
    await withGatewayOn([answer], ([url]) => ({ models: [modelEntry('m', [{ kind, url }])] }), async (gw, [up]) => {
      const res = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...EXTRAS });
      expect(res.status).toBe(200);
      const sent = up.received[0].body;
      for (const [field, value] of Object.entries(EXTRAS)) {
        if (forwarded.includes(field)) expect(sent[field], field).toEqual(value);
        else expect(sent, field).not.toHaveProperty(field);
      }
    });
  });

  it('name the end user on the usage event, for a kind that is not sent it too', async () => {
    await withGatewayOn([answer], ([url]) => ({ models: [modelEntry('m', [{ kind: 'llamacpp', url }])] }), async (gw, [up]) => {
      await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'hi' }], user: 'end-user-42' });
      expect(up.received[0].body).not.toHaveProperty('user');
      const events = () => usageEventsOf(gw.redis.client, gw.account);
      await until(async () => (await events()).length === 1);
      expect((await events())[0]).toMatchObject({ user: 'end-user-42', outcome: 'complete' });
    });
  });
});

describe("a model's passThrough", () => {
  it('sends the engine extras it names unchanged, and no field it does not name', async () => {
    const extras = { top_k: 20, chat_template_kwargs: { enable_thinking: false }, repetition_penalty: 1.1 };
    await withGatewayOn([answer], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }], { passThrough: ['top_k', 'chat_template_kwargs', 'repetition_penalty'] })] }), async (gw, [up]) => {
      const res = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extras, min_p: 0.05, guided_json: { type: 'object' } });
      expect(res.status).toBe(200);
      expect(up.received[0].body).toMatchObject(extras);
      expect(up.received[0].body).not.toHaveProperty('min_p');
      expect(up.received[0].body).not.toHaveProperty('guided_json');
    });
  });

  it('refuses text in a passed-through field that is not valid Unicode, with no upstream call', async () => {
    await withGatewayOn([answer], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }], { passThrough: ['chat_template_kwargs'] })] }), async (gw, [up]) => {
      const res = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'hi' }], chat_template_kwargs: { note: 'a\ud800' } });
      expect(res.status).toBe(400);
      expect((await res.json()).error.param).toBe('chat_template_kwargs.note');
      expect(up.received).toHaveLength(0);
    });
  });

  it("cannot name a field Parley itself reads", () => {
    const file = JSON.stringify({ models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }], { passThrough: ['top_k', 'messages'] })] });
    expect(() => parseRoutingFile(file, 'routing.json', '.')).toThrow(/messages is a field Parley itself reads/);
  });
});
