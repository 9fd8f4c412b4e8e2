// Keys a platform team can hand out safely: a key limited to some models,
// and a key that expires. Each limit holds on every replica at once, with no
// upstream call and no charge for what it refuses.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { budgetRenewsAt, createApiKey, findApiKeyById, keySpend, setKeyLimits } from '../../src/accounts/api-keys.js';
import { readUsageEvents } from '../../src/billing/usage-events.js';
import { runParley } from '../support/parley-process.js';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { completionBody, replyJson, until, type Script } from '../support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway, TEST_KEY_SECRET, withGatewayOn } from '../support/gateway.js';

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

  it('lists only the models it may call, and is a 404 for the others by id', async () => {
    await withGatewayOn([answer], twoModels, async (gw) => {
      const { key } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'search team', { models: ['allowed'] });
      const get = (path: string) => fetch(`${gw.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
      expect((await (await get('/v1/models')).json()).data.map((m: { id: string }) => m.id)).toEqual(['allowed']);
      expect((await get('/v1/models/allowed')).status).toBe(200);
      const hidden = await get('/v1/models/other');
      expect(hidden.status).toBe(404);
      expect((await hidden.json()).error.code).toBe('model_not_found');
      expect((await gw.client.models.list()).data.map((m) => m.id)).toEqual(['allowed', 'other']);
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

describe('a key with a budget', () => {
  // A prompt of "hi" is held as 18 tokens (its bytes and the template's framing) at 1 micro-unit,
  // each reply token at 2. The upstream counts the same 18 and answers max_tokens tokens, up to 5:
  // with max_tokens 5 a reply costs its hold, 28, exactly.
  const metered: Script = (req, res) => {
    const completion = Math.min(5, req.body.max_tokens ?? 5);
    replyJson(res, completionBody('ok', { prompt_tokens: 18, completion_tokens: completion }));
  };
  const oneModel = ([url]: string[]) => ({ models: [modelEntry('allowed', [{ kind: 'vllm', url }])] });

  it('never spends past its budget, however many requests race for it across the replicas', async () => {
    await withGatewayOn([metered], oneModel, async (gw, [up]) => {
      const second = await startTestGateway(oneModel([up.url]), { redis: gw.redis });
      try {
        const { key, record } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'k', { budget: { limit: 280, period: 'total' } });
        const answers = await Promise.all(
          Array.from({ length: 50 }, (_, i) => postChat({ url: (i % 2 ? second : gw).url, apiKey: key }, { model: 'allowed', messages, max_tokens: 5 })),
        );
        const statuses = answers.map((r) => r.status);
        expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);
        const refusal = await answers.find((r) => r.status === 429)!.json();
        expect(refusal.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota', message: expect.stringContaining("This API key's budget of 0.00") });
        await until(async () => (await keySpend(gw.redis.client, record)).held === 0);
        const { spent } = await keySpend(gw.redis.client, record);
        let charged = 0;
        for await (const e of readUsageEvents(gw.redis.client, gw.account)) if (e.key === record.id) charged += e.charged;
        expect(spent).toBe(charged);
        // Holds are taken in order, each 28 of the 280: exactly ten are served, and the budget is spent to the last unit.
        expect(statuses.filter((s) => s === 200)).toHaveLength(10);
        expect(spent).toBe(280);
        expect(up.received).toHaveLength(10);
        expect((await postChat({ url: gw.url, apiKey: key }, { model: 'allowed', messages, max_tokens: 1 })).status).toBe(429);
        expect(up.received).toHaveLength(10);
        // The account's balance paid for exactly what the key spent.
        expect((await readBalance(gw.redis.client, gw.account))!.held).toBe(0);
      } finally {
        await second.close();
      }
    });
  });

  it('lowers max_tokens to what is left of it, as the balance does, and renews with its period', async () => {
    await withGatewayOn([metered], oneModel, async (gw, [up]) => {
      const now = Date.now();
      const { key, record } = await createApiKey(gw.redis.client, TEST_KEY_SECRET, gw.account, 'k', { budget: { limit: 52, period: 'day' } });
      const limited = { url: gw.url, apiKey: key };
      expect((await postChat(limited, { model: 'allowed', messages, max_tokens: 5 })).status).toBe(200);
      await until(async () => (await keySpend(gw.redis.client, record)).spent === 28);
      // 24 left: 18 for the prompt, 3 reply tokens at 2.
      expect((await postChat(limited, { model: 'allowed', messages, max_tokens: 5 })).status).toBe(200);
      expect(up.received[1].body.max_tokens).toBe(3);
      await until(async () => (await keySpend(gw.redis.client, record)).spent === 52);
      const spent = await postChat(limited, { model: 'allowed', messages, max_tokens: 5 });
      expect(spent.status).toBe(429);
      expect((await spent.json()).error.message).toMatch(/per day is spent; it renews at \d{4}-\d\d-\d\dT00:00:00.000Z/);
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(budgetRenewsAt('day', now)! + 1_000);
      expect((await postChat(limited, { model: 'allowed', messages, max_tokens: 5 })).status).toBe(200);
    });
  });

  it('is set, changed and shown by the operator commands, with what the key spent', async () => {
    await withGatewayOn([metered], oneModel, async (gw) => {
      const env = { REDIS_URL: gw.redis.url, PARLEY_KEY_SECRET: TEST_KEY_SECRET };
      const dir = gw.dataDir;
      const made = await runParley(['keys', 'create', '--account', gw.account, '--name', 'ci', '--budget', '0.000028', '--budget-period', 'month', '--data-dir', dir], env);
      const key = /API key \(shown once\): (\S+)/.exec(made)![1];
      const keyId = /key (key_\w+)/.exec(made)![1];
      expect(made).toContain('budget 0.000028 per month');
      const listed = async () => (await runParley(['keys', 'list', '--account', gw.account, '--data-dir', dir], env)).split('\n').find((l) => l.startsWith(keyId))!.split('\t').slice(-3);
      expect(await listed()).toEqual(['budget 0.000028 per month', 'default tier', '0.00']);
      expect((await postChat({ url: gw.url, apiKey: key }, { model: 'allowed', messages, max_tokens: 5 })).status).toBe(200);
      await until(async () => (await keySpend(gw.redis.client, (await findApiKeyById(gw.redis.client, keyId))!)).spent === 28);
      expect(await listed()).toEqual(['budget 0.000028 per month', 'default tier', '0.000028']);
      expect(await runParley(['keys', 'limits', keyId, '--budget-period', 'day', '--data-dir', dir], env)).toContain('budget 0.000028 per day');
      expect(await runParley(['keys', 'limits', keyId, '--budget', '', '--data-dir', dir], env)).toContain('no budget');
    });
  });
});
