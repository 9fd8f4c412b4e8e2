// Routing through a running gateway with scripted upstreams: failover before
// the first byte and never after, priorities, the attempt budget, concurrency
// limits and queues, circuit breakers and probes, reloads, prefix affinity,
// and the operators' view.
import { request as httpRequest } from 'node:http';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { chunk, completionBody, replyJson, sleep, startFakeUpstream, until, writeEvents, type Script } from '../support/fake-upstream.js';
import { asAdmin, makeAccount, modelEntry, postChat, withGatewayOn } from '../support/gateway.js';

const messages = [{ role: 'user' as const, content: 'hello' }];

const answer = (content: string, delayMs = 0): Script => async (req, res) => {
  await sleep(delayMs);
  if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content }), chunk({}, 'stop')]);
  replyJson(res, completionBody(content, { prompt_tokens: 10, completion_tokens: 1 }));
};

const failWith = (status: number): Script => (_req, res) => replyJson(res, { error: { message: `status ${status}`, type: 'server_error' } }, status);

const vllm = (url: string, extra: Record<string, unknown> = {}) => ({ kind: 'vllm', url, ...extra });
const noProbe = { health: { probe: { intervalMs: 0 } } };

describe('failover before the first byte', () => {
  it.each([
    ['a 500', failWith(500)],
    ['a 429', failWith(429)],
    ['a first-byte timeout', answer('late', 2_000)],
  ])('moves on after %s, and the client sees one reply', async (_name, script) => {
    await withGatewayOn([script, answer('from-b')], ([a, b]) => ({ gateway: { upstreamFirstByteTimeoutMs: 300, ...noProbe }, models: [modelEntry('m', [vllm(a), vllm(b)], { routing: { policy: 'round-robin' } })] }), async (gw, [ua, ub]) => {
      for (let i = 0; i < 2; i++) {
        const reply = await gw.client.chat.completions.create({ model: 'm', messages });
        expect(reply.choices[0].message.content).toBe('from-b');
      }
      expect(ua.received.length + ub.received.length).toBeGreaterThanOrEqual(3);
    });
  });

  it("cancels the other calls of a fan-out when one fails, rather than leave them generating while the request fails over", async () => {
    // llama.cpp's server takes one choice a call: n = 2 is two calls, seeded 7 and 8.
    let hanging: Promise<void> | undefined;
    const oneFailsOneHangs: Script = (req, res) => {
      if (req.body.seed === 7) return replyJson(res, { error: { message: 'boom' } }, 500);
      hanging = new Promise((resolve) => res.once('close', () => resolve()));
    };
    await withGatewayOn([oneFailsOneHangs, answer('from-b')], ([a, b]) => ({ gateway: { upstreamIdleTimeoutMs: 60_000, ...noProbe }, models: [modelEntry('m', [{ kind: 'llamacpp', url: a }, { kind: 'llamacpp', url: b, priority: 1 }])] }), async (gw, [, ub]) => {
      const started = Date.now();
      const reply = await gw.client.chat.completions.create({ model: 'm', messages, n: 2, seed: 7 });
      expect(reply.choices.map((c) => c.message.content)).toEqual(['from-b', 'from-b']);
      expect(ub.received).toHaveLength(2);
      await until(async () => hanging !== undefined);
      await hanging;
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  });

  it('moves on after a refused connection', async () => {
    const dead = await startFakeUpstream(answer('never'));
    await dead.close();
    await withGatewayOn([answer('alive')], ([live]) => ({ gateway: noProbe, models: [modelEntry('m', [vllm(dead.url), vllm(live)], { routing: { policy: 'round-robin' } })] }), async (gw) => {
      for (let i = 0; i < 4; i++) expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('alive');
    });
  });

  it('never splices a second reply after the first byte: a stream that breaks ends with the error event', async () => {
    const breaks: Script = async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'half' }))}\n\n`);
      await sleep(20);
      res.destroy();
    };
    await withGatewayOn([breaks, answer('other')], ([a, b]) => ({ gateway: noProbe, models: [modelEntry('m', [vllm(a), vllm(b, { priority: 1 })])] }), async (gw, [, ub]) => {
      const raw = await (await postChat(gw, { model: 'm', messages, stream: true })).text();
      expect(raw).toContain('half');
      expect(raw).toContain('"type":"server_error"');
      expect(raw).not.toContain('other');
      expect(ub.received).toHaveLength(0);
    });
  });

  it('stops at the attempt budget and answers 502', async () => {
    await withGatewayOn([failWith(500), failWith(500), failWith(500)], (urls) => ({ gateway: { failover: { maxAttempts: 2 }, ...noProbe }, models: [modelEntry('m', urls.map((u) => vllm(u)))] }), async (gw, ups) => {
      const res = await postChat(gw, { model: 'm', messages });
      expect(res.status).toBe(502);
      expect(ups.reduce((n, u) => n + u.received.length, 0)).toBe(2);
    });
  });
});

describe('priorities', () => {
  it('sends traffic to a lower priority only when the higher cannot serve', async () => {
    await withGatewayOn([answer('primary'), answer('fallback')], ([a, b]) => ({ gateway: noProbe, models: [modelEntry('m', [vllm(b, { priority: 1 }), vllm(a)])] }), async (gw, [primary, fallback]) => {
      for (let i = 0; i < 3; i++) expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('primary');
      primary.setScript(failWith(503));
      expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('fallback');
      expect(fallback.received).toHaveLength(1);
    });
  });
});

describe('concurrency limits', () => {
  it('answers 503 queue_full at once when the endpoint is full and its queue too', async () => {
    await withGatewayOn([answer('slow', 1_500)], ([a]) => ({ gateway: noProbe, models: [modelEntry('m', [vllm(a, { maxConcurrent: 1, maxQueue: 0 })])] }), async (gw) => {
      const first = postChat(gw, { model: 'm', messages });
      await sleep(100);
      const started = Date.now();
      const second = await postChat(gw, { model: 'm', messages });
      expect(second.status).toBe(503);
      expect((await second.json()).error.code).toBe('queue_full');
      expect(second.headers.get('retry-after')).toBeTruthy();
      // At once: well before the first request's 1.5 s are up (a slow machine's margin, not a speed bound).
      expect(Date.now() - started).toBeLessThan(1_000);
      expect((await first).status).toBe(200);
    });
  });

  it('queues within maxQueue and serves in turn', async () => {
    await withGatewayOn([answer('queued', 200)], ([a]) => ({ gateway: noProbe, models: [modelEntry('m', [vllm(a, { maxConcurrent: 1, maxQueue: 4 })])] }), async (gw, [up]) => {
      let peak = 0;
      let now = 0;
      up.setScript(async (req, res) => {
        peak = Math.max(peak, ++now);
        await answer('queued', 100)(req, res);
        now--;
      });
      const statuses = await Promise.all([0, 1, 2].map(() => postChat(gw, { model: 'm', messages }).then((r) => r.status)));
      expect(statuses).toEqual([200, 200, 200]);
      expect(peak).toBe(1);
    });
  });
});

describe('health', () => {
  it("opens the circuit on two accounts' failures, then lets one request test it and closes on success", async () => {
    await withGatewayOn([failWith(500), answer('steady')], ([a, b]) => ({ gateway: { health: { failureThreshold: 2, openMs: 400, probe: { intervalMs: 0 } } }, models: [modelEntry('m', [vllm(a), vllm(b, { priority: 1 })])] }), async (gw, [flaky]) => {
      const other = await makeAccount(gw.redis, 10);
      const otherClient = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: other.key, maxRetries: 0 });
      await gw.client.chat.completions.create({ model: 'm', messages });
      await otherClient.chat.completions.create({ model: 'm', messages });
      expect(flaky.received).toHaveLength(2);
      // The suspicion is settled by a probe of the endpoint, which fails as well.
      await until(async () => flaky.received.length === 3);
      await sleep(20);
      for (let i = 0; i < 3; i++) await gw.client.chat.completions.create({ model: 'm', messages });
      expect(flaky.received).toHaveLength(3);
      flaky.setScript(answer('recovered'));
      await sleep(450);
      expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('recovered');
      expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('recovered');
    });
  });

  it('an active probe brings a recovered endpoint back', async () => {
    await withGatewayOn([failWith(500), answer('steady')], ([a, b]) => ({ gateway: { health: { failureThreshold: 1, minCallers: 1, openMs: 60_000, probe: { intervalMs: 100, path: '/models' } } }, models: [modelEntry('m', [vllm(a), vllm(b, { priority: 1 })])] }), async (gw, [flaky]) => {
      await gw.client.chat.completions.create({ model: 'm', messages });
      flaky.setScript((req, res) => (req.path.endsWith('/models') ? replyJson(res, { data: [] }) : answer('back')(req, res)));
      await sleep(300);
      expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('back');
    });
  });

  it('finishes a request on the routing table it started with, though a reload lands while its body is on the way', async () => {
    const config = (maxAttempts: number) => ([a, b]: string[]) => ({ gateway: { failover: { maxAttempts }, ...noProbe }, models: [modelEntry('m', [vllm(a), vllm(b, { priority: 1 })])] });
    await withGatewayOn([failWith(500), answer('second try')], config(2), async (gw, ups) => {
      const request = httpRequest(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}` } });
      const reply = new Promise<{ status: number; text: string }>((resolve) =>
        request.on('response', async (res) => {
          let text = '';
          for await (const piece of res) text += piece;
          resolve({ status: res.statusCode!, text });
        }),
      );
      const body = JSON.stringify({ model: 'm', messages });
      request.write(body.slice(0, 10));
      gw.writeConfig(config(1)(ups.map((u) => u.url)));
      // The reload has landed once a whole request gets one attempt only.
      for (let i = 0; i < 50 && (await postChat(gw, { model: 'm', messages })).status === 200; i++) await sleep(50);
      request.end(body.slice(10));
      const { status, text } = await reply;
      expect(status).toBe(200);
      expect(JSON.parse(text).choices[0].message.content).toBe('second try');
    });
  });

  it('takes an endpoint added to or removed from the routing file without a restart', async () => {
    await withGatewayOn([answer('one'), answer('two')], ([a]) => ({ gateway: noProbe, models: [modelEntry('m', [vllm(a)])] }), async (gw, [, two]) => {
      expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('one');
      gw.writeConfig({ gateway: noProbe, models: [modelEntry('m', [vllm(two.url)])] });
      let content = '';
      for (let i = 0; i < 50 && content !== 'two'; i++) {
        await sleep(50);
        content = (await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content!;
      }
      expect(content).toBe('two');
      const view = await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json();
      expect(view.data[0].endpoints.map((e: { url: string }) => e.url)).toEqual([two.url]);
    });
  });
});

describe('prefix affinity through the gateway', () => {
  it('sends each tenant to one endpoint and spreads tenants over the pool', async () => {
    const scripts = [answer('a'), answer('b'), answer('c')];
    await withGatewayOn(scripts, (urls) => ({ gateway: noProbe, models: [modelEntry('m', urls.map((u) => vllm(u)))] }), async (gw) => {
      const homes = new Map<number, Set<string>>();
      for (let round = 0; round < 3; round++) {
        for (let tenant = 0; tenant < 6; tenant++) {
          const system = `You are tenant ${tenant}'s assistant. `.repeat(40);
          const reply = await gw.client.chat.completions.create({ model: 'm', messages: [{ role: 'system', content: system }, { role: 'user', content: `question ${round}` }] });
          if (!homes.has(tenant)) homes.set(tenant, new Set());
          homes.get(tenant)!.add(reply.choices[0].message.content!);
        }
      }
      for (const served of homes.values()) expect(served.size).toBe(1);
      expect(new Set([...homes.values()].map((s) => [...s][0])).size).toBeGreaterThan(1);
    });
  });

  it('routes by prompt_cache_key where a client names one: sessions with one system prompt each keep their own endpoint, spread over the pool', async () => {
    const scripts = [answer('a'), answer('b'), answer('c'), answer('d')];
    await withGatewayOn(scripts, (urls) => ({ gateway: noProbe, models: [modelEntry('m', urls.map((u) => vllm(u)))] }), async (gw) => {
      const system = 'You are a coding agent. '.repeat(60);
      const homes = new Map<number, Set<string>>();
      for (let turn = 0; turn < 3; turn++) {
        for (let session = 0; session < 8; session++) {
          const reply = await gw.client.chat.completions.create({ model: 'm', prompt_cache_key: `session-${session}`, messages: [{ role: 'system', content: system }, { role: 'user', content: `turn ${turn}` }] });
          if (!homes.has(session)) homes.set(session, new Set());
          homes.get(session)!.add(reply.choices[0].message.content!);
        }
      }
      for (const served of homes.values()) expect(served.size).toBe(1);
      // 8 sessions over 4 endpoints: 2 each, where one shared prompt alone would send all 8 to one.
      const perEndpoint = new Map<string, number>();
      for (const served of homes.values()) perEndpoint.set([...served][0], (perEndpoint.get([...served][0]) ?? 0) + 1);
      expect([...perEndpoint.values()]).toEqual([2, 2, 2, 2]);
    });
  });
});

describe('the operators\' view', () => {
  it('shows per endpoint health, circuit, in flight, queue, cached-token share and latency', async () => {
    await withGatewayOn([answer('x')], ([a]) => ({ gateway: noProbe, models: [modelEntry('m', [vllm(a)])] }), async (gw) => {
      await gw.client.chat.completions.create({ model: 'm', messages });
      const res = await fetch(`${gw.url}/admin/v1/endpoints`, { headers: asAdmin });
      expect(res.status).toBe(200);
      const [model] = (await res.json()).data;
      expect(model).toMatchObject({ model: 'm', policy: 'prefix-affinity' });
      expect(model.endpoints[0]).toMatchObject({ health: 'healthy', circuit: 'closed', inFlight: 0, queued: 0, requests: 1, failures: 0, cachedTokenShare: 0 });
      expect(model.endpoints[0].latencyMs.ewma).toBeGreaterThanOrEqual(0);
    });
  });

  it('is on only with the admin token: a wrong or missing one is a 401, and with none set it answers 404 to everyone, this machine too', async () => {
    await withGatewayOn([answer('x')], ([a]) => ({ models: [modelEntry('m', [vllm(a)])] }), async (gw) => {
      expect((await fetch(`${gw.url}/admin/endpoints`)).status).toBe(401);
      expect((await fetch(`${gw.url}/admin/endpoints`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
      expect((await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).status).toBe(200);
      const token = process.env.PARLEY_ADMIN_TOKEN;
      delete process.env.PARLEY_ADMIN_TOKEN;
      try {
        for (const path of ['/admin/endpoints', '/admin/v1/endpoints', '/admin/v1/accounts']) expect((await fetch(`${gw.url}${path}`, { headers: asAdmin })).status).toBe(404);
      } finally {
        process.env.PARLEY_ADMIN_TOKEN = token;
      }
    });
  });
});
