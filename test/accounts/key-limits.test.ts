// Keys a platform team can hand out safely: a key limited to some models,
// and a key that expires. Each limit holds on every replica at once, with no
// upstream call and no charge for what it refuses.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createApiKey, setKeyLimits } from '../../src/accounts/api-keys.js';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { completionBody, replyJson, until, type Script } from '../support/fake-upstream.js';
import { modelEntry, postChat, TEST_KEY_SECRET, withGatewayOn } from '../support/gateway.js';

const answer: Script = (_req, res) => replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }));
const messages = [{ role: 'user' as const, content: 'hi' }];
const twoModels = ([url]: string[]) => ({ models: [modelEntry('allowed', [{ kind: 'vllm', url }]), modelEntry('other', [{ kind: 'vllm', url }])] });

afterEach(() => {
  vi.useRealTimers();
});

describe('a key limited to some models', () => {
  it("is refused any other model with OpenAI's 404 for a model it cannot reach, no upstream call and no charge", async () => {
    await withGatewayOn([answer], twoModels, async (gw, [up]) => {
      const { key } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'search team', { models: ['allowed'] });
      const limited = { url: gw.url, apiKey: key };
      expect((await postChat(limited, { model: 'allowed', messages })).status).toBe(200);
      await until(async () => (await readBalance(gw.redis.client, gw.account))!.held === 0);
      const before = await readBalance(gw.redis.client, gw.account);
      const refused = await postChat(limited, { model: 'other', messages });
      expect(refused.status).toBe(404);
      expect((await refused.json()).error).toMatchObject({ code: 'model_not_found', param: 'model', message: expect.stringContaining('do not have access') });
      expect(up.received).toHaveLength(1);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
    });
  });

  it('takes a change of its models at once, though the replica had it cached', async () => {
    await withGatewayOn([answer], twoModels, async (gw) => {
      const { key, record } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'k', { models: ['allowed'] });
      const limited = { url: gw.url, apiKey: key };
      expect((await postChat(limited, { model: 'other', messages })).status).toBe(404);
      await setKeyLimits(gw.redis.client, record.id, { models: null });
      await until(async () => (await postChat(limited, { model: 'other', messages })).status === 200, 2_000);
    });
  });
});

describe('a key with an expiry', () => {
  it('works until then, and is a 401 invalid_api_key that says it expired after', async () => {
    await withGatewayOn([answer], twoModels, async (gw) => {
      const now = Date.now();
      const { key } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'k', { expiresAt: now + 60_000 });
      const expiring = { url: gw.url, apiKey: key };
      expect((await postChat(expiring, { model: 'allowed', messages })).status).toBe(200);
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(now + 61_000);
      const res = await postChat(expiring, { model: 'allowed', messages });
      expect(res.status).toBe(401);
      expect((await res.json()).error).toMatchObject({ code: 'invalid_api_key', message: expect.stringContaining('expired at') });
    });
  });
});
