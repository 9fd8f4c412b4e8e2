// Service tiers through OpenAI's `service_tier` (and Anthropic's, and the
// Responses API's): the tier a key may use, said on every reply, charged at
// its prices, admitted in its order, flex refused with OpenAI's 429 when it
// waits too long; and an endpoint's maxConcurrent held by the whole fleet.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { setKeyLimits } from '../../src/accounts/api-keys.js';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { handleApiRequest, type ApiDescriptor } from '../../src/gateway/api-path.js';
import { chat } from '../../src/gateway/chat-completions.js';
import type { ChatCompletionRequest } from '../../src/protocol/chat-request.js';
import { readUsageEvents, usageCsv } from '../../src/billing/usage-events.js';
import { usageEventsOf } from '../support/ledger.js';
import { completionBody, greeting, replyJson, sleep, until, type Script } from '../support/fake-upstream.js';
import { asAdmin, makeAccount, modelEntry, postChat, startTestGateway, withGatewayOn, type TestGateway } from '../support/gateway.js';

const messages = [{ role: 'user' as const, content: 'hi' }];
/** 1,000 prompt tokens (200 cached) and 500 out: 800 × 1 + 200 × 0.1 + 500 × 2 = 1,820 micro-units at the default prices. */
const metered: Script = (req, res) => (req.path.endsWith('/chat/completions') ? replyJson(res, completionBody('ok', { prompt_tokens: 1000, completion_tokens: 500, prompt_tokens_details: { cached_tokens: 200 } })) : replyJson(res, { data: [] }));
const oneModel = (extra: Record<string, unknown> = {}) => ([url]: string[]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }], extra)] });

const events = (gw: TestGateway, account = gw.account) => usageEventsOf(gw.redis.client, account);

describe('the service tier', () => {
  it("is the key's unless the request asks for another it may use, and every reply says which served it", async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const ask = async (tier?: string) => (await gw.client.chat.completions.create({ model: 'm', messages, ...(tier ? { service_tier: tier as 'flex' } : {}) })).service_tier;
      expect(await ask()).toBe('default');
      expect(await ask('auto')).toBe('default');
      expect(await ask('flex')).toBe('flex');
      // A key without priority asking for it is served at default, and told so.
      expect(await ask('priority')).toBe('default');

      const stream = await gw.client.chat.completions.create({ model: 'm', messages, stream: true, service_tier: 'flex' });
      const tiers = new Set<string | null | undefined>();
      for await (const chunk of stream) tiers.add(chunk.service_tier);
      expect([...tiers]).toEqual(['flex']);

      const responses = await gw.client.responses.create({ model: 'm', input: 'hi', service_tier: 'flex' });
      expect(responses.service_tier).toBe('flex');
      const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 });
      const message = await anthropic.messages.create({ model: 'm', max_tokens: 10, messages, service_tier: 'standard_only' });
      expect(message.usage.service_tier).toBe('standard');
    });
  });

  it('is priority for a key an operator gave it, through the admin API, and auto is then priority', async () => {
    await withGatewayOn([greeting()], oneModel(), async (gw) => {
      const { keyId, key } = await makeAccount(gw.redis, 1);
      const res = await fetch(`${gw.url}/admin/v1/keys/${keyId}`, { method: 'PATCH', headers: { ...asAdmin, 'content-type': 'application/json' }, body: JSON.stringify({ tier: 'priority' }) });
      expect(res.status).toBe(200);
      expect((await res.json()).tier).toBe('priority');
      const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
      await until(async () => (await client.chat.completions.create({ model: 'm', messages })).service_tier === 'priority');
      expect((await client.chat.completions.create({ model: 'm', messages, service_tier: 'default' })).service_tier).toBe('default');
    });
  });

  it('prices flex at half the model\'s prices and priority at what the routing file says, on the usage events and the CSV', async () => {
    const tierPrices = { priority: { inputCacheMiss: 2, inputCacheHit: 0.2, output: 4 } };
    await withGatewayOn([metered], oneModel({ tierPrices }), async (gw) => {
      const { account, key, keyId } = await makeAccount(gw.redis, 1);
      await setKeyLimits(gw.redis.client, keyId, { tier: 'priority' });
      const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
      await until(async () => (await client.chat.completions.create({ model: 'm', messages, service_tier: 'flex' })).service_tier === 'flex');
      for (const service_tier of ['default', 'priority'] as const) await client.chat.completions.create({ model: 'm', messages, service_tier });
      await until(async () => (await events(gw, account)).length >= 3);
      const byTier = new Map((await events(gw, account)).map((e) => [e.tier, e.cost]));
      expect(Object.fromEntries(byTier)).toEqual({ flex: 910, default: 1820, priority: 3640 });
      const spent = (await events(gw, account)).reduce((sum, e) => sum + e.charged, 0);
      expect((await readBalance(gw.redis.client, account))!.granted).toBe(1_000_000 - spent);
      let csv = '';
      for await (const line of usageCsv(readUsageEvents(gw.redis.client, account))) csv += line;
      expect(csv.split('\n')[0].endsWith(',service_tier')).toBe(true);
      expect(csv).toMatch(/,flex\n/);
    });
  });

  it("passes each tier's priority to a vLLM endpoint that schedules by priority, and none to one that does not", async () => {
    await withGatewayOn([greeting(), greeting()], ([a, b]) => ({
      gateway: { health: { probe: { intervalMs: 0 } } },
      models: [modelEntry('p', [{ kind: 'vllm', url: a, priorityScheduling: true }]), modelEntry('q', [{ kind: 'vllm', url: b }])],
    }), async (gw, [scheduling, plain]) => {
      for (const service_tier of ['flex', 'default'] as const) {
        await gw.client.chat.completions.create({ model: 'p', messages, service_tier });
        await gw.client.chat.completions.create({ model: 'q', messages, service_tier });
      }
      expect(scheduling.received.map((r) => r.body.priority)).toEqual([1, 0]);
      expect(plain.received.every((r) => !('priority' in r.body))).toBe(true);
    });
  });
});

/** An upstream that answers once `release` is called, counting the requests it holds at once. */
function holdingUpstream() {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const counts = { now: 0, most: 0 };
  const script: Script = async (req, res) => {
    if (!req.path.endsWith('/chat/completions')) return replyJson(res, { data: [] });
    counts.now++;
    counts.most = Math.max(counts.most, counts.now);
    await released;
    counts.now--;
    replyJson(res, completionBody('ok', { prompt_tokens: 10, completion_tokens: 1 }));
  };
  return { script, counts, release: () => release() };
}

describe("an endpoint's capacity", () => {
  it('is the whole fleet\'s: three replicas never send it more than maxConcurrent at once, and serve every request in turn', async () => {
    const upstream = holdingUpstream();
    const config = (url: string) => ({ gateway: { health: { probe: { intervalMs: 0 } } }, models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 2 }])] });
    await withGatewayOn([upstream.script], ([url]) => config(url), async (gw, [up]) => {
      const others = [await startTestGateway(config(up.url), { redis: gw.redis }), await startTestGateway(config(up.url), { redis: gw.redis })];
      try {
        const replicas = [gw, ...others];
        const sent = Array.from({ length: 6 }, (_, i) => replicas[i % 3].client.chat.completions.create({ model: 'm', messages }));
        await sleep(300);
        expect(upstream.counts.most).toBe(2);
        upstream.release();
        expect((await Promise.all(sent)).every((r) => r.choices[0].message.content === 'ok')).toBe(true);
        expect(upstream.counts.most).toBe(2);
      } finally {
        upstream.release();
        for (const o of others) await o.close();
      }
    });
  });

  it('gives back the slot a request took beside its credit hold when the hold is refused', async () => {
    await withGatewayOn([greeting()], ([url]) => ({
      gateway: { health: { probe: { intervalMs: 0 } }, failover: { queueTimeoutMs: 200 } },
      models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 1 }])],
    }), async (gw) => {
      const broke = await makeAccount(gw.redis, 0);
      for (let i = 0; i < 3; i++) expect((await postChat({ ...gw, apiKey: broke.key }, { model: 'm', messages })).status).toBe(402);
      // Its one slot is free: a funded request is served at once, not queued past its timeout.
      const served = await gw.client.chat.completions.create({ model: 'm', messages });
      expect(served.choices[0].message.content).toBe('Hello there');
      expect(gw.context.router.snapshot()[0].endpoints[0].inFlight).toBe(0);
    });
  });

  it('gives back its slot and its hold when its reply fails to open after the hold (a renderer that throws)', async () => {
    await withGatewayOn([greeting()], ([url]) => ({
      gateway: { health: { probe: { intervalMs: 0 } }, failover: { queueTimeoutMs: 200 } },
      models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 1 }])],
    }), async (gw) => {
      const failing: ApiDescriptor<ChatCompletionRequest> = { ...chat, streaming: { ...chat.streaming!, renderer: () => { throw new Error('renderer failed'); } } };
      const server = createServer((req, res) => {
        const span = gw.context.telemetry.tracer.startSpan('failing renderer');
        handleApiRequest(failing, req, res, gw.context, span, { id: 'failing', attempts: 0 }).catch(() => res.writeHead(500).end());
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const failed = await postChat({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: gw.apiKey }, { model: 'm', messages, stream: true });
        expect(failed.status).toBe(500);
        await until(async () => (await readBalance(gw.redis.client, gw.account))!.held === 0);
        expect(gw.context.router.snapshot()[0].endpoints[0].inFlight).toBe(0);
        // Its one slot is free: a request through the gateway is served at once, not queued past its timeout.
        const served = await gw.client.chat.completions.create({ model: 'm', messages });
        expect(served.choices[0].message.content).toBe('Hello there');
      } finally {
        server.close();
      }
    });
  });

  it("keeps flex off its last slot, which a default request then takes; flex waiting past its timeout gets OpenAI's 429 and costs nothing", async () => {
    const upstream = holdingUpstream();
    await withGatewayOn([upstream.script], ([url]) => ({
      gateway: { health: { probe: { intervalMs: 0 } }, failover: { flexQueueTimeoutMs: 200 } },
      models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 2 }])],
    }), async (gw) => {
      try {
        const before = (await readBalance(gw.redis.client, gw.account))!;
        const first = gw.client.chat.completions.create({ model: 'm', messages, service_tier: 'flex' });
        await until(async () => upstream.counts.now === 1);
        const refused = await postChat(gw, { model: 'm', messages, service_tier: 'flex' });
        expect(refused.status).toBe(429);
        expect((await refused.json()).error).toMatchObject({ code: 'resource_unavailable', type: 'rate_limit_error' });
        const interactive = gw.client.chat.completions.create({ model: 'm', messages });
        await until(async () => upstream.counts.now === 2);
        upstream.release();
        await Promise.all([first, interactive]);
        await until(async () => (await events(gw)).length === 3);
        const refusedEvent = (await events(gw)).find((e) => e.outcome !== 'complete')!;
        expect(refusedEvent).toMatchObject({ tier: 'flex', charged: 0 });
        const after = (await readBalance(gw.redis.client, gw.account))!;
        expect(before.granted - after.granted).toBe((await events(gw)).reduce((sum, e) => sum + e.charged, 0));
        expect(after.held).toBe(0);
      } finally {
        upstream.release();
      }
    });
  });
});
