// One tenant cannot hurt another: requests that fail because of their own
// content open no circuit, text that is not valid Unicode never reaches an
// upstream, an upstream's 5xx that names the request's fault is a 4xx, and
// a tenant naming a new session at every request keeps only its quota of
// the affinity keys that every tenant's homes are placed from, and no
// tenant reads another's prefix cache.
import { connect, type Socket } from 'node:net';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { chunk, completionBody, replyJson, type Script } from '../support/fake-upstream.js';
import { NEW_KEYS_PER_ACCOUNT } from '../../src/routing/new-key-quota.js';
import { asAdmin, makeAccount, modelEntry, postChat, startFleetOn, startTestGateway, withGatewayOn, type TestGateway } from '../support/gateway.js';

const messages = [{ role: 'user' as const, content: 'hello' }];

/** An upstream that fails every request holding the word POISON with a 500 that says nothing of why, and answers the rest (its probe among them). */
const failsOnPoison: Script = (req, res) => {
  if (req.path.endsWith('/models')) return replyJson(res, { object: 'list', data: [] });
  if (JSON.stringify(req.body.messages).includes('POISON')) return replyJson(res, { error: { message: 'Internal Server Error', type: 'server_error' } }, 500);
  replyJson(res, completionBody('fine', { prompt_tokens: 5, completion_tokens: 1 }));
};

const health = { health: { failureThreshold: 2, openMs: 60_000, probe: { intervalMs: 0 } } };

async function circuits(gw: TestGateway): Promise<string[]> {
  const view = await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json();
  return view.data[0].endpoints.map((e: { circuit: string }) => e.circuit);
}

async function otherTenant(gw: TestGateway): Promise<OpenAI> {
  const { key } = await makeAccount(gw.redis, 10);
  return new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
}

describe('poison requests', () => {
  it("that every endpoint answers with the same 500 open no circuit, and other tenants keep getting 200", async () => {
    await withGatewayOn([failsOnPoison, failsOnPoison], (urls) => ({ gateway: health, models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })))] }), async (gw) => {
      const victim = await otherTenant(gw);
      for (let i = 0; i < 6; i++) {
        const res = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: `POISON ${i}` }] });
        expect(res.status).toBe(502);
        expect((await victim.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('fine');
      }
      expect(await circuits(gw)).toEqual(['closed', 'closed']);
    });
  });

  it('from one tenant open no circuit on a single endpoint, however many there are', async () => {
    await withGatewayOn([failsOnPoison], ([url]) => ({ gateway: health, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const victim = await otherTenant(gw);
      for (let i = 0; i < 10; i++) expect((await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'POISON' }] })).status).toBe(502);
      expect(await circuits(gw)).toEqual(['closed']);
      expect((await victim.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('fine');
    });
  });

  it("still open the circuit of an endpoint that fails several tenants' requests", async () => {
    const broken: Script = (_req, res) => replyJson(res, { error: { message: 'CUDA error: out of memory' } }, 500);
    await withGatewayOn([broken], ([url]) => ({ gateway: health, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const second = await otherTenant(gw);
      expect((await postChat(gw, { model: 'm', messages })).status).toBe(502);
      await expect(second.chat.completions.create({ model: 'm', messages })).rejects.toMatchObject({ status: 502 });
      // The suspicion is settled by a probe, which fails too.
      await expect.poll(() => circuits(gw)).toEqual(['open']);
    });
  });

  it("open the circuit of an endpoint whose failures another endpoint does not repeat, though one tenant sent them all", async () => {
    const broken: Script = (_req, res) => replyJson(res, { error: { message: 'Internal Server Error' } }, 500);
    const fine: Script = (_req, res) => replyJson(res, completionBody('fine', { prompt_tokens: 5, completion_tokens: 1 }));
    // Round robin sends every other request to the broken endpoint first, whatever prefix affinity would choose.
    await withGatewayOn([broken, fine], (urls) => ({ gateway: health, models: [{ ...modelEntry('m', urls.map((url) => ({ kind: 'vllm', url }))), routing: { policy: 'round-robin' } }] }), async (gw) => {
      for (let i = 0; i < 4; i++) expect((await postChat(gw, { model: 'm', messages })).status).toBe(200);
      await expect.poll(() => circuits(gw)).toEqual(['open', 'closed']);
    });
  });

  it("llama.cpp's 500 for a body its JSON library cannot read is a 400 for the client, and no failure of the endpoint", async () => {
    const llamaServer: Script = (req, res) => {
      if (JSON.stringify(req.body).includes('POISON')) {
        return replyJson(res, { error: { code: 500, message: "[json.exception.parse_error.101] parse error at line 1, column 52: syntax error while parsing value - invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF; last read: '\"a\\ud800b'", type: 'server_error' } }, 500);
      }
      replyJson(res, completionBody('fine', { prompt_tokens: 5, completion_tokens: 1 }));
    };
    await withGatewayOn([llamaServer], ([url]) => ({ gateway: { health: { ...health.health, minCallers: 1 } }, models: [modelEntry('m', [{ kind: 'llamacpp', url }])] }), async (gw, [up]) => {
      for (let i = 0; i < 3; i++) {
        const res = await postChat(gw, { model: 'm', messages: [{ role: 'user', content: 'POISON' }] });
        expect(res.status).toBe(400);
        expect((await res.json()).error).toMatchObject({ type: 'invalid_request_error', code: 'upstream_rejected' });
      }
      expect(up.received).toHaveLength(3);
      expect(await circuits(gw)).toEqual(['closed']);
      expect((await gw.client.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('fine');
    });
  });
});

describe('request-caused failures from many accounts', () => {
  // Ten failures the requests cause (the endpoint answers its probe and other tenants meanwhile), from three accounts,
  // then a fourth account's twenty requests: all served, every circuit closed. With one endpoint and with three,
  // behind one gateway replica and behind three on one Redis.
  for (const [endpoints, replicas] of [[1, 1], [3, 1], [1, 3], [3, 3]]) {
    it(`open no circuit: ${endpoints} endpoint(s), ${replicas} replica(s)`, async () => {
      const scripts = Array.from({ length: endpoints }, () => failsOnPoison);
      const config = (urls: string[]) => ({ gateway: { health: { failureThreshold: 2, minCallers: 2, openMs: 60_000 } }, models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })))] });
      await withGatewayOn(scripts, config, async (gw, ups) => {
        const gateways: TestGateway[] = [gw];
        for (let i = 1; i < replicas; i++) gateways.push(await startTestGateway(config(ups.map((u) => u.url)), { redis: gw.redis }));
        try {
          const attackers = await Promise.all([0, 1, 2].map(() => makeAccount(gw.redis, 10)));
          for (let i = 0; i < 10; i++) {
            const replica = gateways[i % replicas];
            const res = await postChat({ url: replica.url, apiKey: attackers[i % 3].key }, { model: 'm', messages: [{ role: 'user', content: `POISON ${i}` }] });
            expect(res.status).toBe(502);
          }
          const victim = await makeAccount(gw.redis, 10);
          for (let i = 0; i < 20; i++) {
            const res = await postChat({ url: gateways[i % replicas].url, apiKey: victim.key }, { model: 'm', messages });
            expect(res.status, `request ${i}`).toBe(200);
          }
          for (const replica of gateways) expect(await circuits(replica)).toEqual(Array(endpoints).fill('closed'));
        } finally {
          for (const replica of gateways.slice(1)) await replica.close();
        }
      });
    });
  }
});

describe('a saturated endpoint', () => {
  it("gives one account's burst only its share of the queue, so another account is still queued and served", async () => {
    const slow: Script = async (_req, res) => {
      await new Promise((r) => setTimeout(r, 150));
      replyJson(res, completionBody('fine', { prompt_tokens: 5, completion_tokens: 1 }));
    };
    await withGatewayOn([slow], ([url]) => ({ gateway: health, models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 1, maxQueue: 2 }])] }), async (gw) => {
      const victim = await otherTenant(gw);
      const burst = Promise.all(Array.from({ length: 4 }, () => postChat(gw, { model: 'm', messages }).then((r) => r.status)));
      await new Promise((r) => setTimeout(r, 50));
      const served = await victim.chat.completions.create({ model: 'm', messages });
      expect(served.choices[0].message.content).toBe('fine');
      expect((await burst).sort()).toEqual([200, 200, 503, 503]);
    });
  });
});

describe('a client that stops reading its reply', () => {
  /** A chat completion sent on a socket of the test's own, whose reading it can stop. */
  const rawChat = (gw: TestGateway, request: unknown): Socket => {
    const body = JSON.stringify(request);
    const socket = connect(Number(new URL(gw.url).port), '127.0.0.1');
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gw.apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    return socket;
  };
  /** A long reply, streamed as fast as the gateway takes it: some 16 MB, more than the sockets between hold. */
  const flood: Script = async (req, res) => {
    if (req.path.endsWith('/models')) return replyJson(res, { object: 'list', data: [] });
    if (!req.body.stream) return replyJson(res, completionBody('fine', { prompt_tokens: 5, completion_tokens: 1 }));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const piece = `data: ${JSON.stringify(chunk({ content: 'x'.repeat(1000) }))}\n\n`;
    for (let i = 0; i < 16_000 && !res.destroyed; i++) if (!res.write(piece)) await new Promise((r) => res.once('drain', r));
    res.end(`data: ${JSON.stringify({ ...chunk({}, 'stop'), usage: { prompt_tokens: 5, completion_tokens: 16_000 } })}\n\ndata: [DONE]\n\n`);
  };

  it("is cut off once it has taken nothing for clientSendTimeoutMs, freeing its endpoint's slot for other tenants, and is charged nothing", async () => {
    const config = ([url]: string[]) => ({ gateway: { ...health, clientSendTimeoutMs: 1_000, failover: { queueTimeoutMs: 5_000 } }, models: [modelEntry('m', [{ kind: 'vllm', url, maxConcurrent: 1 }])] });
    await withGatewayOn([flood], config, async (gw) => {
      const before = await readBalance(gw.redis.client, gw.account);
      const stalled = rawChat(gw, { model: 'm', messages, stream: true });
      // It reads the first bytes, then no more.
      await new Promise((r) => stalled.once('data', r));
      stalled.pause();
      const closed = new Promise((r) => stalled.once('close', r));
      const victim = await otherTenant(gw);
      const started = Date.now();
      expect((await victim.chat.completions.create({ model: 'm', messages })).choices[0].message.content).toBe('fine');
      expect(Date.now() - started).toBeLessThan(4_000);
      stalled.resume();
      await closed;
      await expect.poll(() => readBalance(gw.redis.client, gw.account)).toEqual(before);
    });
  });
  it('leaves a whole reply it does not take to be dropped after clientSendTimeoutMs, not kept in the gateway for ever', async () => {
    const content = 'x'.repeat(24 * 1024 * 1024);
    const whole: Script = (req, res) => (req.path.endsWith('/models') ? replyJson(res, { object: 'list', data: [] }) : replyJson(res, completionBody(content, { prompt_tokens: 5, completion_tokens: 1 })));
    await withGatewayOn([whole], ([url]) => ({ gateway: { ...health, clientSendTimeoutMs: 500 }, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const stalled = rawChat(gw, { model: 'm', messages });
      let received = 0;
      await new Promise((r) => stalled.once('data', (d: Buffer) => r((received += d.length))));
      stalled.pause();
      await new Promise((r) => setTimeout(r, 2_000));
      // Read on: what the gateway still held was dropped with the connection, so the reply comes short and the connection ends.
      const closed = new Promise((r) => stalled.once('close', r));
      stalled.on('data', (d: Buffer) => (received += d.length));
      stalled.resume();
      expect(await Promise.race([closed.then(() => 'closed'), new Promise((r) => setTimeout(() => r('still open'), 5_000))])).toBe('closed');
      expect(received).toBeLessThan(content.length);
    });
  });
});

describe('a tenant cycling prompt_cache_key', () => {
  it('keeps only its quota of new affinity keys; the rest go by their own order, and another tenant’s new key is kept', async () => {
    const named = (name: string): Script => (req, res) => (req.path.endsWith('/models') ? replyJson(res, { data: [] }) : replyJson(res, completionBody(name, { prompt_tokens: 5, completion_tokens: 1 })));
    await withGatewayOn(['a', 'b', 'c', 'd'].map(named), (urls) => ({ gateway: health, models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })))] }), async (gw) => {
      const ask = async (client: OpenAI, key: string) => (await client.chat.completions.create({ model: 'm', messages, max_tokens: 1, prompt_cache_key: key } as never)).choices[0].message.content!;
      const keptKeys = async () => {
        const view = await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json();
        return view.data[0].endpoints.reduce((sum: number, e: { affinityKeys: number }) => sum + e.affinityKeys, 0);
      };
      const cycling = gw.client;
      // A session's first requests sent at once: each is new until the key is placed, and the key counts once.
      await Promise.all(Array.from({ length: 8 }, () => ask(cycling, 'cycle-0')));
      for (let i = 0; i < NEW_KEYS_PER_ACCOUNT + 40; i += 8) await Promise.all(Array.from({ length: 8 }, (_, j) => ask(cycling, `cycle-${i + j}`)));
      expect(await keptKeys()).toBe(NEW_KEYS_PER_ACCOUNT);
      // Past its quota, a key still goes to one endpoint each time.
      const unkept = new Set(await Promise.all(Array.from({ length: 6 }, () => ask(cycling, 'cycle-past-quota'))));
      expect(unkept.size).toBe(1);
      const other = await otherTenant(gw);
      await ask(other, 'another-team');
      expect(await keptKeys()).toBe(NEW_KEYS_PER_ACCOUNT + 1);
    });
  });
});

describe('text that is not valid Unicode', () => {
  const tool = { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } } };
  const cases: [param: string, body: Record<string, unknown>][] = [
    ['messages[0].content', { messages: [{ role: 'user', content: 'a\ud800b' }] }],
    ['messages[0].content[0].text', { messages: [{ role: 'user', content: [{ type: 'text', text: '\udc00' }] }] }],
    ['messages[0].name', { messages: [{ role: 'user', content: 'hi', name: 'x\udbff' }] }],
    ['messages[1].tool_calls[0].function.arguments', {
      messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{"q": "\ud83d"}' } }] }],
    }],
    ['stop[1]', { messages, stop: ['ok', 'end\ud800'] }],
    ['tools[0].function.description', { messages, tools: [{ ...tool, function: { ...tool.function, description: 'finds \udfff' } }] }],
    ['tools[0].function.parameters.properties.q\ud800', { messages, tools: [{ ...tool, function: { ...tool.function, parameters: { type: 'object', properties: { 'q\ud800': { type: 'string' } } } } }] }],
  ];

  it.each(cases)('is a 400 naming %s, with no upstream call and no charge', async (param, body) => {
    await withGatewayOn([failsOnPoison], ([url]) => ({ gateway: health, models: [modelEntry('m', [{ kind: 'vllm', url }], { supports: { tools: true, jsonOutput: true } })] }), async (gw, [up]) => {
      const before = await readBalance(gw.redis.client, gw.account);
      const res = await postChat(gw, { model: 'm', ...body });
      expect(res.status).toBe(400);
      const { error } = await res.json();
      expect(error).toMatchObject({ type: 'invalid_request_error', param });
      expect(error.message).toMatch(/not valid Unicode/);
      expect(up.received).toHaveLength(0);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
    });
  });

  it('is accepted where a surrogate pair makes one character', async () => {
    await withGatewayOn([failsOnPoison], ([url]) => ({ gateway: health, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw, [up]) => {
      const reply = await gw.client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'a \ud83d\ude00 face' }] });
      expect(reply.choices[0].message.content).toBe('fine');
      expect(up.received[0].body.messages[0].content).toBe('a 😀 face');
    });
  });
});

describe('the prefix cache', () => {
  /** Answers chat and text completions alike, and the gateway's probe. */
  const fine: Script = (req, res) => {
    if (req.path.endsWith('/models')) return replyJson(res, { object: 'list', data: [] });
    const usage = { prompt_tokens: 5, completion_tokens: 1 };
    if (req.path.endsWith('/chat/completions')) return replyJson(res, completionBody('fine', usage));
    replyJson(res, { id: 'up-1', object: 'text_completion', created: 1, model: 'up', choices: [{ index: 0, text: 'fine', finish_reason: 'stop' }], usage });
  };
  const saltsOf = (up: { received: { path: string; body: Record<string, any> }[] }) => up.received.filter((r) => !r.path.endsWith('/models')).map((r) => r.body.cache_salt);
  const long = [{ role: 'system' as const, content: 'You answer questions about the billing service. '.repeat(20) }, { role: 'user' as const, content: 'hi' }];

  it("is each account's own on vLLM and SGLang: every chat and completion carries its account's salt, which names no account", async () => {
    await withGatewayOn([fine, fine], ([v, sg]) => ({ gateway: health, models: [modelEntry('v', [{ kind: 'vllm', url: v }], { api: ['chat', 'completions'] }), modelEntry('s', [{ kind: 'sglang', url: sg }])] }), async (gw, [vllm, sglang]) => {
      const other = await otherTenant(gw);
      for (const client of [gw.client, other]) {
        await client.chat.completions.create({ model: 'v', messages });
        await client.completions.create({ model: 'v', prompt: 'hello' });
        await client.chat.completions.create({ model: 's', messages });
      }
      const [ownChat, ownText, otherChat, otherText] = saltsOf(vllm);
      expect(ownChat).toMatch(/^[\w-]{43}$/);
      expect(ownText).toBe(ownChat);
      expect(otherText).toBe(otherChat);
      expect(otherChat).not.toBe(ownChat);
      expect(saltsOf(sglang)).toEqual([ownChat, otherChat]);
      expect(JSON.stringify(vllm.received)).not.toContain(gw.account);
    });
  });

  it('carries the same salt for an account from every replica, so that the fleet reads one cache per account', async () => {
    const fleet = await startFleetOn([fine], ([url]) => ({ gateway: health, models: [modelEntry('m', [{ kind: 'vllm', url }])] }), 3);
    try {
      for (const replica of fleet.replicas) await replica.client.chat.completions.create({ model: 'm', messages });
      const [first, ...others] = saltsOf(fleet.upstreams[0]);
      expect(first).toMatch(/^[\w-]{43}$/);
      expect(others).toEqual([first, first]);
    } finally {
      await fleet.close();
    }
  });

  it('carries no salt where the model shares its cache, nor to an engine that takes none', async () => {
    await withGatewayOn([fine, fine], ([v, l]) => ({ gateway: health, models: [modelEntry('shared', [{ kind: 'vllm', url: v }], { routing: { prefixCache: 'shared' } }), modelEntry('l', [{ kind: 'llamacpp', url: l }])] }), async (gw, [vllm, llamacpp]) => {
      await gw.client.chat.completions.create({ model: 'shared', messages });
      await gw.client.chat.completions.create({ model: 'l', messages });
      expect(saltsOf(vllm)).toEqual([undefined]);
      expect(saltsOf(llamacpp)).toEqual([undefined]);
    });
  });

  it("puts a salt the client sends after its account's, so that it only divides the account's cache", async () => {
    await withGatewayOn([fine], ([url]) => ({ gateway: health, models: [modelEntry('m', [{ kind: 'vllm', url }], { passThrough: ['cache_salt'] })] }), async (gw, [up]) => {
      const other = await otherTenant(gw);
      await gw.client.chat.completions.create({ model: 'm', messages });
      await gw.client.chat.completions.create({ model: 'm', messages, cache_salt: 'user-7' } as never);
      await other.chat.completions.create({ model: 'm', messages, cache_salt: 'user-7' } as never);
      const [own, ownDivided, otherDivided] = saltsOf(up);
      expect(ownDivided).toBe(`${own}.user-7`);
      expect(otherDivided).toMatch(/\.user-7$/);
      expect(otherDivided).not.toBe(ownDivided);
    });
  });

  it("gives each account's system prompt a home of its own, where a shared cache gives them one", async () => {
    for (const [prefixCache, keys] of [['per-account', 2], ['shared', 1]] as const) {
      await withGatewayOn([fine, fine], (urls) => ({ gateway: health, models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })), { routing: { prefixCache } })] }), async (gw) => {
        await gw.client.chat.completions.create({ model: 'm', messages: long });
        await (await otherTenant(gw)).chat.completions.create({ model: 'm', messages: long });
        const view = await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json();
        expect(view.data[0].endpoints.reduce((sum: number, e: { affinityKeys: number }) => sum + e.affinityKeys, 0)).toBe(keys);
      });
    }
  });
});
