// Prefix placement as a fleet: three gateway replicas on one Redis learn the
// same prefixes in the same order, and so send every tenant (and every agent
// session that names itself) to the same endpoint, without asking one
// another on the request path.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { PrefixAffinityPolicy } from '../../src/routing/policies/prefix-affinity.js';
import { PrefixSharing, SHARE_INTERVAL_MS } from '../../src/routing/prefix-sharing.js';
import { conversationKey } from '../../src/routing/affinity-key.js';
import { completionBody, replyJson, sleep, until, type Script } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, startTestGateway, withGatewayOn } from '../support/gateway.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

const tenantRequest = (tenant: number, question: string) => ({
  key: conversationKey([{ role: 'system', content: `Tenant ${tenant} has its own long instructions. `.repeat(20) }, { role: 'user', content: question }]),
});
const pool = () => ['a', 'b', 'c', 'd'].map((name) => ({ name, load: 0, weight: 1 }));

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

describe('prefixes shared through Redis', () => {
  it('give three replicas that saw the tenants in different orders the same homes, two tenants per endpoint', async () => {
    const sharings = [0, 1, 2].map(() => new PrefixSharing(redis.client));
    try {
      const policies = sharings.map((s) => new PrefixAffinityPolicy({ loadFactor: 1.25, maxImbalance: 4, placementSlack: 0.25 }, s.known('m')));
      const tenants = [0, 1, 2, 3, 4, 5, 6, 7];
      policies.forEach((policy, r) => {
        for (const t of [...tenants.slice(r * 3), ...tenants.slice(0, r * 3)]) policy.onRouted('', tenantRequest(t, `first at ${r}`));
      });
      await sleep(3 * SHARE_INTERVAL_MS);
      const homes = policies.map((policy) => tenants.map((t) => policy.order(pool(), tenantRequest(t, 'later'))[0].name));
      expect(homes[1]).toEqual(homes[0]);
      expect(homes[2]).toEqual(homes[0]);
      for (const e of ['a', 'b', 'c', 'd']) expect(homes[0].filter((h) => h === e)).toHaveLength(2);
    } finally {
      for (const s of sharings) s.close();
    }
  });

  it('let a replica that joins later place as the others do from its first request', async () => {
    const first = new PrefixSharing(redis.client);
    const late = new PrefixSharing(redis.client);
    try {
      const settings = { loadFactor: 1.25, maxImbalance: 4, placementSlack: 0.25 };
      const early = new PrefixAffinityPolicy(settings, first.known('m2'));
      for (let t = 0; t < 8; t++) early.onRouted('', tenantRequest(t, 'q'));
      await sleep(3 * SHARE_INTERVAL_MS);
      const joined = new PrefixAffinityPolicy(settings, late.known('m2'));
      await sleep(3 * SHARE_INTERVAL_MS);
      for (let t = 0; t < 8; t++) expect(joined.order(pool(), tenantRequest(t, 'new'))[0].name).toBe(early.order(pool(), tenantRequest(t, 'new'))[0].name);
    } finally {
      first.close();
      late.close();
    }
  });
});

/**
 * Asks each of 8 keys (tenants, sessions) once, through the replicas in
 * turn, lets the fleet share what it saw, then asks 3 rounds more, each key
 * through another replica each round (the rounds one after another, or at
 * once): every key must keep one endpoint of a, b, c, d, two keys each.
 */
async function expectOneHomeEach(ask: (replica: number, key: number, text: string) => Promise<string>, rounds: 'in turn' | 'at once'): Promise<void> {
  for (let k = 0; k < 8; k++) await ask(k % 3, k, 'first');
  await sleep(3 * SHARE_INTERVAL_MS);
  const served = new Map<number, Set<string>>();
  const round = async (r: number) => {
    for (let k = 0; k < 8; k++) served.set(k, (served.get(k) ?? new Set()).add(await ask((k + r) % 3, k, `round ${r}`)));
  };
  if (rounds === 'at once') await Promise.all([0, 1, 2].map(round));
  else for (const r of [0, 1, 2]) await round(r);
  for (const endpoints of served.values()) expect(endpoints.size).toBe(1);
  const homes = [...served.values()].map((s) => [...s][0]);
  for (const e of ['a', 'b', 'c', 'd']) expect(homes.filter((h) => h === e)).toHaveLength(2);
}

describe('three gateway replicas on one Redis', () => {
  it('send each tenant to one endpoint, whichever replica the client reaches', async () => {
    const named = (name: string): Script => (_req, res) => replyJson(res, completionBody(name, { prompt_tokens: 10, completion_tokens: 1 }));
    await withGatewayOn([named('a'), named('b'), named('c'), named('d')], (urls) => ({
      gateway: { health: { probe: { intervalMs: 0 } } },
      models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })))],
    }), async (gw) => {
      const config = { gateway: { health: { probe: { intervalMs: 0 } } }, models: [modelEntry('m', gw.context.routing().models.get('m')!.endpoints.map((e) => ({ kind: 'vllm', url: e.url })))] };
      const others = [await startTestGateway(config, { redis: gw.redis }), await startTestGateway(config, { redis: gw.redis })];
      try {
        const replicas = [gw, ...others];
        const ask = async (replica: number, tenant: number, question: string) => {
          const r = replicas[replica];
          const reply = await r.client.chat.completions.create({ model: 'm', messages: [{ role: 'system', content: `Tenant ${tenant} has its own long instructions. `.repeat(20) }, { role: 'user', content: question }] });
          return reply.choices[0].message.content!;
        };
        await expectOneHomeEach(ask, 'in turn');
      } finally {
        for (const o of others) await o.close();
      }
    });
  });

  it("keep each agent session on one endpoint whichever replica it reaches, through the Messages and Responses APIs, with every account's books exact", async () => {
    const named = (name: string): Script => (req, res) => (req.path.endsWith('/chat/completions') ? replyJson(res, completionBody(name, { prompt_tokens: 100, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 60 } })) : replyJson(res, { data: [] }));
    await withGatewayOn([named('a'), named('b'), named('c'), named('d')], (urls) => ({
      gateway: { health: { probe: { intervalMs: 0 } } },
      models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })))],
    }), async (gw) => {
      const config = { gateway: { health: { probe: { intervalMs: 0 } } }, models: [modelEntry('m', gw.context.routing().models.get('m')!.endpoints.map((e) => ({ kind: 'vllm', url: e.url })))] };
      const others = [await startTestGateway(config, { redis: gw.redis }), await startTestGateway(config, { redis: gw.redis })];
      const tenants = await Promise.all([0, 1, 2].map(() => makeAccount(gw.redis, 1)));
      try {
        const replicas = [gw, ...others];
        const system = 'You are a coding agent with one long shared system prompt. '.repeat(30);
        // Sessions 0-3 are Claude Code's (Messages, their session in metadata.user_id); 4-7 are Codex's (Responses, prompt_cache_key).
        const turn = async (replica: number, session: number, text: string): Promise<string> => {
          const { url } = replicas[replica];
          const apiKey = tenants[session % 3].key;
          if (session < 4) {
            const metadata = { user_id: JSON.stringify({ device_id: 'd', account_uuid: '', session_id: `cc-${session}` }) };
            const reply = await new Anthropic({ baseURL: url, apiKey, maxRetries: 0 }).messages.create({ model: 'm', max_tokens: 16, system, metadata, messages: [{ role: 'user', content: text }] });
            return (reply.content[0] as { text: string }).text;
          }
          const reply = await new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 }).responses.create({ model: 'm', instructions: system, input: text, prompt_cache_key: `codex-${session}` });
          return reply.output_text;
        };
        await expectOneHomeEach(turn, 'at once');
        // Each reply: 40 uncached × 1 + 60 cached × 0.1 + 2 output × 2 micro-units = 50.
        for (const [i, tenant] of tenants.entries()) {
          const replies = [0, 1, 2, 3, 4, 5, 6, 7].filter((session) => session % 3 === i).length * 4;
          await until(async () => {
            const b = (await readBalance(gw.redis.client, tenant.account))!;
            return b.held === 0 && b.granted === 1_000_000 - 50 * replies;
          });
        }
      } finally {
        for (const o of others) await o.close();
      }
    });
  });
});

