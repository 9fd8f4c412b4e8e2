// Prefix placement as a fleet: three gateway replicas on one Redis learn the
// same prefixes in the same order, and so send every tenant (and every agent
// session that names itself) to the same endpoint, without asking one
// another on the request path.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { PrefixAffinityPolicy } from '../../src/routing/policies/prefix-affinity.js';
import { PrefixSharing, SHARE_INTERVAL_MS, WHOLE_EVERY_MS } from '../../src/routing/prefix-sharing.js';
import { conversationKey } from '../../src/routing/affinity-key.js';
import { completionBody, replyJson, sleep, until, type Script } from '../support/fake-upstream.js';
import { asAdmin, makeAccount, modelEntry, postChat, startTestGateway, withGatewayOn, type TestGateway } from '../support/gateway.js';
import { FLEET_LOAD_INTERVAL_MS } from '../../src/routing/fleet-load.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';
import { redisKeys } from '../../src/redis/keys.js';

const tenantRequest = (tenant: number, question: string) => ({
  key: conversationKey([{ role: 'system', content: `Tenant ${tenant} has its own long instructions. `.repeat(20) }, { role: 'user', content: question }]),
});
const pool = () => ['a', 'b', 'c', 'd'].map((name) => ({ name, load: 0, weight: 1 }));
const keysOf = (s: PrefixSharing, model: string) => [...s.known(model).keys()];
const prefixKeys = (model: string) => redisKeys.prefixes(model);

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

describe('prefixes shared through Redis', () => {
  it('give three replicas that saw the tenants in different orders the same homes, two tenants per endpoint', async () => {
    const sharings = [0, 1, 2].map(() => new PrefixSharing(redis.client));
    try {
      const policies = sharings.map((s) => new PrefixAffinityPolicy({ loadFactor: 1.25, maxImbalance: 4, placementSlack: 0.25, prefillTokensPerSecond: 10_000 }, s.known('m')));
      const tenants = [0, 1, 2, 3, 4, 5, 6, 7];
      policies.forEach((policy, r) => {
        for (const t of [...tenants.slice(r * 3), ...tenants.slice(0, r * 3)]) policy.order(pool(), tenantRequest(t, `first at ${r}`));
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
      const settings = { loadFactor: 1.25, maxImbalance: 4, placementSlack: 0.25, prefillTokensPerSecond: 10_000 };
      const early = new PrefixAffinityPolicy(settings, first.known('m2'));
      for (let t = 0; t < 8; t++) early.order(pool(), tenantRequest(t, 'q'));
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

describe('the fleet order, shared as what changed', () => {

  it('carries no keys in an exchange once a replica has the order and nothing new was seen', async () => {
    const replies: unknown[][] = [];
    // The replica's client, with the script's replies noted.
    const watched = new Proxy(redis.client, {
      get(target, name, receiver) {
        if (name !== 'evalsha') return Reflect.get(target, name, receiver);
        return async (...args: unknown[]) => {
          const reply = (await (target.evalsha as (...a: unknown[]) => Promise<unknown[]>)(...args)) as unknown[];
          replies.push(reply);
          return reply;
        };
      },
    });
    const sharing = new PrefixSharing(watched);
    try {
      for (let k = 0; k < 50; k++) sharing.known('quiet').saw(`key-${k}`);
      await until(async () => replies.length >= 1);
      replies.length = 0;
      await sleep(3 * SHARE_INTERVAL_MS);
      expect(replies.length).toBeGreaterThanOrEqual(2);
      for (const reply of replies) expect(reply[3]).toEqual([]);
      expect(keysOf(sharing, 'quiet')).toHaveLength(50);
    } finally {
      sharing.close();
    }
  });

  it('drops on every replica a key the fleet forgot, and keeps their orders one', async () => {
    const [a, b] = [new PrefixSharing(redis.client), new PrefixSharing(redis.client)];
    try {
      for (let k = 0; k < 6; k++) a.known('forgetting').saw(`key-${k}`);
      b.known('forgetting').saw('key-from-b');
      await until(async () => keysOf(b, 'forgetting').length === 7 && keysOf(a, 'forgetting').length === 7);
      // key-2 unseen for longer than PREFIX_IDLE_MS, as the fleet's last-seen set would say.
      await redis.client.zadd(prefixKeys('forgetting').lastSeen, 0, 'key-2');
      await until(async () => !keysOf(a, 'forgetting').includes('key-2') && !keysOf(b, 'forgetting').includes('key-2'));
      expect(keysOf(a, 'forgetting')).toHaveLength(6);
      expect(keysOf(b, 'forgetting')).toEqual(keysOf(a, 'forgetting'));
    } finally {
      a.close();
      b.close();
    }
  });

  it('takes the whole order afresh when Redis has lost the keys', async () => {
    const [a, b] = [new PrefixSharing(redis.client), new PrefixSharing(redis.client)];
    try {
      for (let k = 0; k < 4; k++) a.known('lost').saw(`old-${k}`);
      await until(async () => keysOf(b, 'lost').length === 4);
      const k = prefixKeys('lost');
      await redis.client.del(k.firstSeen, k.lastSeen, k.forgotten, k.forgetting);
      b.known('lost').saw('new');
      await until(async () => keysOf(a, 'lost').includes('new'));
      await sleep(2 * SHARE_INTERVAL_MS);
      expect(keysOf(a, 'lost')).toEqual(['new']);
      expect(keysOf(b, 'lost')).toEqual(['new']);
    } finally {
      a.close();
      b.close();
    }
  });

  it('takes the whole order every WHOLE_EVERY_MS all the same, so that a forgetting listed nowhere is not kept for good', async () => {
    let clock = 0;
    const sharing = new PrefixSharing(redis.client, () => clock);
    try {
      for (let k = 0; k < 3; k++) sharing.known('unlisted').saw(`key-${k}`);
      const k = prefixKeys('unlisted');
      await until(async () => (await redis.client.zcard(k.firstSeen)) === 3);
      // Forgotten as a replica of an earlier version forgets: out of both sets, in no list.
      await redis.client.zrem(k.firstSeen, 'key-1');
      await redis.client.zrem(k.lastSeen, 'key-1');
      await sleep(3 * SHARE_INTERVAL_MS);
      expect(keysOf(sharing, 'unlisted')).toContain('key-1');
      clock += WHOLE_EVERY_MS;
      await until(async () => !keysOf(sharing, 'unlisted').includes('key-1'));
      expect(keysOf(sharing, 'unlisted')).toEqual(['key-0', 'key-2']);
    } finally {
      sharing.close();
    }
  });

  it('takes the whole order where Redis no longer lists forgettings the replica missed', async () => {
    const sharing = new PrefixSharing(redis.client);
    try {
      for (let k = 0; k < 4; k++) sharing.known('behind').saw(`key-${k}`);
      const k = prefixKeys('behind');
      await until(async () => (await redis.client.zcard(k.firstSeen)) === 4);
      await sleep(2 * SHARE_INTERVAL_MS);
      // key-1 forgotten, and that forgetting (with four more) no longer listed, as when many keys went since.
      await redis.client.zrem(k.firstSeen, 'key-1');
      await redis.client.zrem(k.lastSeen, 'key-1');
      await redis.client.hset(k.forgetting, 'count', 5, 'trimmed', 5);
      await until(async () => !keysOf(sharing, 'behind').includes('key-1'));
      expect(keysOf(sharing, 'behind')).toEqual(['key-0', 'key-2', 'key-3']);
    } finally {
      sharing.close();
    }
  });
});

describe("a key's moves, shared", () => {
  const settings = { loadFactor: 1.25, maxImbalance: 4, placementSlack: 0.25, prefillTokensPerSecond: 10_000 };
  const idle = ['a', 'b', 'c'].map((name) => ({ name, load: 4, weight: 1, capacity: 8, heldMs: 4000 }));
  const busyAt = (name: string, load: number, engineQueue: number) => idle.map((c) => (c.name === name ? { ...c, load, engineQueue } : c));
  const session = (promptTokens: number) => ({ key: 'session-9', promptTokens });

  it('let a replica that did not send a key away count its prompt cached where it went, and at home once another sends it back', async () => {
    const sharings = [new PrefixSharing(redis.client), new PrefixSharing(redis.client)];
    try {
      const [mover, other] = sharings.map((s) => new PrefixAffinityPolicy(settings, s.known('moves')));
      const home = mover.order(idle, session(2_000))[0].name;
      await sleep(3 * SHARE_INTERVAL_MS);
      expect(other.order(idle, session(2_000))[0].name).toBe(home);
      // 8 in flight at home fills it: a 500 ms queue against 200 ms of reading a 2,000-token prompt elsewhere.
      const away = mover.order(busyAt(home, 8, 1), session(2_000))[0].name;
      expect(away).not.toBe(home);
      await sleep(3 * SHARE_INTERVAL_MS);
      // At 20,000 tokens the home's queue costs less than reading all of it again (2,000 ms), which would send the
      // key home; but its prompt is cached where the other replica sent it, and stays there after the home frees.
      expect(other.order(busyAt(home, 8, 1), session(20_000))[0].name).toBe(away);
      expect(other.order(idle, session(20_000))[0].name).toBe(away);
      // Where it went fills (a 1,000 ms queue): this replica sends a short prompt home, and the first follows.
      expect(other.order(busyAt(away, 9, 2), session(2_000))[0].name).toBe(home);
      await sleep(3 * SHARE_INTERVAL_MS);
      expect(mover.order(idle, session(20_000))[0].name).toBe(home);
    } finally {
      for (const s of sharings) s.close();
    }
  });

  it('drop a moved key’s move with the key when the fleet forgets it', async () => {
    const [a, b] = [new PrefixSharing(redis.client), new PrefixSharing(redis.client)];
    try {
      a.known('moved-then-gone').saw('k');
      a.known('moved-then-gone').move('k', 'b');
      await until(async () => b.known('moved-then-gone').movedTo('k') === 'b');
      const k = prefixKeys('moved-then-gone');
      await redis.client.zadd(k.lastSeen, 0, 'k');
      await until(async () => !keysOf(a, 'moved-then-gone').includes('k') && !keysOf(b, 'moved-then-gone').includes('k'));
      expect(a.known('moved-then-gone').movedTo('k')).toBeUndefined();
      expect(b.known('moved-then-gone').movedTo('k')).toBeUndefined();
      expect(await redis.client.hlen(k.movedTo)).toBe(0);
      expect(await redis.client.zcard(k.moves)).toBe(0);
      // A move that reaches Redis after its key was forgotten (sent late, the key not seen since) is dropped too.
      a.known('moved-then-gone').move('k', 'c');
      await sleep(3 * SHARE_INTERVAL_MS);
      expect(await redis.client.hlen(k.movedTo)).toBe(0);
      expect(b.known('moved-then-gone').movedTo('k')).toBeUndefined();
    } finally {
      a.close();
      b.close();
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

/** Starts two more replicas of `gw` on its Redis, with its routing file (and `gateway` settings), runs `body` on all three, and stops the two. */
async function asFleet<T>(gw: TestGateway, gateway: Record<string, unknown>, routing: Record<string, unknown>, body: (replicas: TestGateway[]) => Promise<T>): Promise<T> {
  const config = { gateway, models: [modelEntry('m', gw.context.routing().models.get('m')!.endpoints.map((e) => ({ kind: 'vllm', url: e.url })), { routing })] };
  const others = [await startTestGateway(config, { replicaOf: gw }), await startTestGateway(config, { replicaOf: gw })];
  try {
    return await body([gw, ...others]);
  } finally {
    for (const o of others) await o.close();
  }
}

/** An upstream that answers chat and text completions with its name, and `usage`; the probe's list with nothing. */
const named = (name: string, usage: Record<string, unknown> = { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11 }): Script => (req, res) => {
  if (req.path.endsWith('/models')) return replyJson(res, { data: [] });
  if (req.path.endsWith('/chat/completions')) return replyJson(res, completionBody(name, usage));
  replyJson(res, { id: 'cmpl-1', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: name, finish_reason: 'stop' }], usage });
};
const noProbe = { health: { probe: { intervalMs: 0 } } };
const fourNamed = (gateway: Record<string, unknown> = noProbe, usage?: Record<string, unknown>): [Script[], (urls: string[]) => unknown] => [
  ['a', 'b', 'c', 'd'].map((name) => named(name, usage)),
  (urls) => ({ gateway, models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })))] }),
];
const agentSystemPrompt = 'You are a coding agent with one long shared system prompt. '.repeat(30);

describe('three gateway replicas on one Redis', () => {
  it('keep each agent session on one endpoint from its second turn, with no hint, though every session shares a long system prompt', async () => {
    await withGatewayOn(...fourNamed(), async (gw) => {
      await asFleet(gw, noProbe, {}, async (replicas) => {
        const ask = async (replica: number, session: number, text: string) => {
          const messages = [
            { role: 'system' as const, content: agentSystemPrompt },
            { role: 'user' as const, content: `Task ${session}: make the tests pass.` },
            { role: 'assistant' as const, content: 'I will read the tests first.' },
            { role: 'user' as const, content: text },
          ];
          return (await replicas[replica].client.chat.completions.create({ model: 'm', messages })).choices[0].message.content!;
        };
        await expectOneHomeEach(ask, 'in turn');
        const view = await (await fetch(`${gw.url}/admin/endpoints`, { headers: asAdmin })).json();
        expect(view.data[0].endpoints.map((e: { affinityKeys: number }) => e.affinityKeys)).toEqual([2, 2, 2, 2]);
      });
    });
  });

  it("keep each session a header names on one endpoint from its first turn: Claude Code's, or the one the routing file names", async () => {
    for (const header of ['x-claude-code-session-id', 'x-team-session']) {
      await withGatewayOn(...fourNamed({ ...noProbe, sessionHeader: 'X-Team-Session' }), async (gw) => {
        await asFleet(gw, { ...noProbe, sessionHeader: 'X-Team-Session' }, {}, async (replicas) => {
          const ask = async (replica: number, session: number, text: string) => {
            const res = await postChat(replicas[replica], { model: 'm', messages: [{ role: 'system', content: agentSystemPrompt }, { role: 'user', content: text }] }, { [header]: `session-${session}` });
            return (await res.json()).choices[0].message.content;
          };
          await expectOneHomeEach(ask, 'at once');
        });
      });
    }
  });

  it('keep each prompt_cache_key of the completions API on one endpoint', async () => {
    await withGatewayOn(...fourNamed({ ...noProbe }), async (gw) => {
      await gw.writeConfig({ gateway: noProbe, models: [modelEntry('m', gw.context.routing().models.get('m')!.endpoints.map((e) => ({ kind: 'vllm', url: e.url })), { api: ['chat', 'completions'] })] });
      await until(async () => gw.context.routing().models.get('m')!.config.api.includes('completions'));
      const ask = async (_replica: number, session: number, text: string) => {
        const reply = await gw.client.completions.create({ model: 'm', prompt: `${agentSystemPrompt}\n${text}`, max_tokens: 4, prompt_cache_key: `batch-${session}` } as never);
        return reply.choices[0].text;
      };
      await expectOneHomeEach(ask, 'in turn');
    });
  });

  it('spill a busy home as one replica would: by the requests the whole fleet has there', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const held = (name: string): Script => async (_req, res) => {
      await released;
      replyJson(res, completionBody(name, { prompt_tokens: 10, completion_tokens: 1 }));
    };
    await withGatewayOn([held('a'), held('b')], (urls) => ({ gateway: noProbe, models: [modelEntry('m', urls.map((url) => ({ kind: 'vllm', url })))] }), async (gw, upstreams) => {
      await asFleet(gw, noProbe, {}, async (replicas) => {
        const messages = [{ role: 'system' as const, content: agentSystemPrompt }, { role: 'user' as const, content: 'one hot tenant' }];
        const sent: Promise<string>[] = [];
        const atUpstreams = () => upstreams.reduce((sum, u) => sum + u.received.length, 0);
        // Each request reaches its upstream before the next is sent, so that each is routed with the ones before it
        // counted (a fixed pause between them was too short on a slow machine, and requests routed at once see
        // the same loads).
        const send = async (replica: number) => {
          const arrived = atUpstreams() + 1;
          sent.push(replicas[replica].client.chat.completions.create({ model: 'm', messages }).then((r) => r.choices[0].message.content!));
          await until(async () => atUpstreams() === arrived);
        };
        // Six in flight through the first replica, all at the home (under its bound of mean + 4), then the fleet's
        // loads exchanged...
        for (let i = 0; i < 6; i++) await send(0);
        await sleep(5 * FLEET_LOAD_INTERVAL_MS);
        // ... so that the second replica, which alone has none there, spills its third and later ones while the home has
        // more than the bound (mean + 4 of the fleet's requests, the spilled ones included).
        for (let i = 0; i < 6; i++) await send(1);
        release();
        const served = await Promise.all(sent);
        const home = served[0];
        expect(served.slice(0, 8).every((e) => e === home)).toBe(true);
        expect(served.slice(8).filter((e) => e !== home).length).toBeGreaterThanOrEqual(2);
        // The first sent away is a spill; those after it go where its prompt is now cached.
        const metrics = await (await fetch(`${replicas[1].url}/metrics`)).text();
        expect(Number(/^parley_affinity_spills_total\{model="m"[^}]*\} (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
      });
    });
  });

  it('place a tenant that none of them has seen alike from its first requests, which reach all three at once', async () => {
    await withGatewayOn(...fourNamed(), async (gw) => {
      await asFleet(gw, noProbe, {}, async (replicas) => {
        const ask = async (replica: number, tenant: number) => {
          const messages = [{ role: 'system' as const, content: `Tenant ${tenant} has its own long instructions. `.repeat(20) }, { role: 'user' as const, content: `from replica ${replica}` }];
          return (await replicas[replica].client.chat.completions.create({ model: 'm', messages })).choices[0].message.content!;
        };
        // Each replica meets the tenants in its own order, all at once.
        const tenants = [0, 1, 2, 3, 4, 5, 6, 7];
        const served = await Promise.all([0, 1, 2].map((r) => Promise.all(tenants.map((t) => ask(r, (t + 3 * r) % 8)).map(async (e, t) => [(t + 3 * r) % 8, await e] as const))));
        const homes = new Map<number, Set<string>>();
        for (const [tenant, endpoint] of served.flat()) homes.set(tenant, (homes.get(tenant) ?? new Set()).add(endpoint));
        for (const endpoints of homes.values()) expect(endpoints.size).toBe(1);
      });
    });
  });

  it('send each tenant to one endpoint, whichever replica the client reaches', async () => {
    await withGatewayOn(...fourNamed(), async (gw) => {
      await asFleet(gw, noProbe, {}, async (replicas) => {
        const ask = async (replica: number, tenant: number, question: string) => {
          const reply = await replicas[replica].client.chat.completions.create({ model: 'm', messages: [{ role: 'system', content: `Tenant ${tenant} has its own long instructions. `.repeat(20) }, { role: 'user', content: question }] });
          return reply.choices[0].message.content!;
        };
        await expectOneHomeEach(ask, 'in turn');
      });
    });
  });

  it("keep each agent session on one endpoint whichever replica it reaches, through the Messages and Responses APIs, with every account's books exact", async () => {
    await withGatewayOn(...fourNamed(noProbe, { prompt_tokens: 100, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 60 } }), async (gw) => {
      await asFleet(gw, noProbe, {}, async (replicas) => {
        const tenants = await Promise.all([0, 1, 2].map(() => makeAccount(gw.redis, 1)));
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
      });
    });
  });
});

