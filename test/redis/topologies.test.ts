// Parley on more than one Redis server, each set up as an operator would:
// a 3-primary Redis Cluster (each primary with a replica), and a primary with
// one replica behind three sentinels. On each, three gateway replicas serve
// many accounts, and the books are exact: racing requests never spend past a
// balance, every reply served is charged once, revocation, platform sessions
// and the audit log reach every replica, and a kill -9 of a primary under
// load loses no money: balance + charges = grants for every account, no hold
// left open, and every 200 paid.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { createAccount, findAccountByEmail } from '../../src/accounts/accounts.js';
import { createApiKey, revokeApiKey } from '../../src/accounts/api-keys.js';
import { createCreditCode, redeemCreditCode } from '../../src/billing/credit-codes.js';
import { changeCredit, readBalance } from '../../src/billing/credit-ledger.js';
import { readUsageEvents } from '../../src/billing/usage-events.js';
import { startGateway, type RunningGateway } from '../../src/gateway/start.js';
import type { Redis } from '../../src/redis/connection.js';
import type { SharedRedis } from '../../src/redis/shared-redis.js';
import { redisKeys } from '../../src/redis/keys.js';
import { answering, chatCalls, sleep, startFakeUpstream, until, type FakeUpstream } from '../support/fake-upstream.js';
import { asAdmin, modelEntry, TEST_KEY_SECRET } from '../support/gateway.js';
import { runParley } from '../support/parley-process.js';
import { startTestCluster, startTestSentinels, type TestCluster, type TestSentinels } from '../support/redis-topologies.js';

// 10 prompt tokens at 1 micro-unit and 5 reply tokens at 2: 20 micro-units a reply.
const CHARGE = 20;

interface Fleet {
  gateways: RunningGateway[];
  redis: Redis;
  close(): Promise<void>;
}

async function startFleet(shared: SharedRedis, upstream: FakeUpstream): Promise<Fleet> {
  const dir = mkdtempSync(join(tmpdir(), 'parley-fleet-'));
  const configPath = join(dir, 'routing.yaml');
  writeFileSync(configPath, stringify({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])], billing: { holdTtlMs: 5_000 }, gateway: { requestLog: false } }));
  const gateways: RunningGateway[] = [];
  for (let i = 0; i < 3; i++) gateways.push(await startGateway({ configPath, dataDir: join(dir, `data-${i}`), host: '127.0.0.1', port: 0, redis: shared, keySecret: TEST_KEY_SECRET }));
  return {
    gateways,
    redis: gateways[0].context.redis,
    close: async () => {
      for (const g of gateways) await g.close(0);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface Tenant {
  account: string;
  key: string;
  keyId: string;
  grant: number;
}

async function makeTenants(redis: Redis, count: number, grant: number): Promise<Tenant[]> {
  const tenants: Tenant[] = [];
  for (let i = 0; i < count; i++) {
    const { id } = await createAccount(redis, { email: `t${i}-${Math.random().toString(36).slice(2)}@example.com` });
    await changeCredit(redis, id, 'grant', grant, 'test');
    const { key, record } = await createApiKey(redis, TEST_KEY_SECRET, id, 'k');
    tenants.push({ account: id, key, keyId: record.id, grant });
  }
  return tenants;
}

async function ask(gateway: RunningGateway, key: string, stream: boolean): Promise<Response> {
  return fetch(`${gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, stream }),
  });
}

/** Reads a reply whole: a stream counts as served only when it ended with [DONE]. */
async function served(res: Response): Promise<boolean> {
  const text = await res.text();
  return res.status === 200 && (!text.startsWith('data:') || text.endsWith('data: [DONE]\n\n'));
}

/** Balance + charges = grants, nothing held, and the charges are exactly the replies served. */
async function expectBooksExact(fleet: Fleet, tenants: Tenant[], servedBy: Map<string, number>): Promise<void> {
  for (const g of fleet.gateways) expect(await g.context.settlements.drain(15_000)).toBe(0);
  for (const t of tenants) {
    const balance = (await readBalance(fleet.redis, t.account))!;
    let charged = 0;
    for await (const e of readUsageEvents(fleet.redis, t.account)) charged += e.charged;
    expect({ account: t.account, total: balance.granted + balance.toppedUp + charged, held: balance.held, charged }).toEqual({
      account: t.account, total: t.grant, held: 0, charged: (servedBy.get(t.account) ?? 0) * CHARGE,
    });
  }
}

/** Every tenant's requests at once, spread over the replicas: some are served, the rest refused for credit, none overspends. */
async function raceForCredit(fleet: Fleet, tenants: Tenant[], perTenant: number): Promise<Map<string, number>> {
  const servedBy = new Map<string, number>();
  const statuses = new Set<number>();
  await Promise.all(
    tenants.flatMap((t, ti) =>
      Array.from({ length: perTenant }, async (_, i) => {
        const res = await ask(fleet.gateways[(ti + i) % 3], t.key, i % 2 === 0);
        statuses.add(res.status);
        if (await served(res)) servedBy.set(t.account, (servedBy.get(t.account) ?? 0) + 1);
      }),
    ),
  );
  expect([...statuses].sort()).toEqual([200, 402]);
  return servedBy;
}

/** Keeps `concurrency` requests going until stopped; notes each answer's status and time. */
function loadUntilStopped(fleet: Fleet, tenants: Tenant[], concurrency: number) {
  const answers: { status: number; at: number; retryAfter: string | null }[] = [];
  const servedBy = new Map<string, number>();
  let stopped = false;
  const worker = async (w: number) => {
    for (let i = 0; !stopped; i++) {
      const t = tenants[(w + i) % tenants.length];
      const res = await ask(fleet.gateways[(w + i) % 3], t.key, i % 2 === 1);
      const ok = await served(res);
      answers.push({ status: res.status, at: Date.now(), retryAfter: res.headers.get('retry-after') });
      if (ok) servedBy.set(t.account, (servedBy.get(t.account) ?? 0) + 1);
      else if (res.status !== 200) await sleep(20);
    }
  };
  const running = Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return { answers, servedBy, stop: async () => ((stopped = true), await running) };
}

/** Signs up on the platform of one replica; the session cookie it gets opens the overview on every replica. Then an admin action is audited. */
async function expectSessionsAndAuditEverywhere(fleet: Fleet): Promise<void> {
  const form = await fetch(`${fleet.gateways[0].url}/platform/signup`);
  const csrfCookie = /parley_csrf=([^;]+)/.exec(form.headers.get('set-cookie') ?? '')![1];
  const email = `member-${Math.random().toString(36).slice(2)}@team.example`;
  const signedUp = await fetch(`${fleet.gateways[0].url}/platform/signup`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `parley_csrf=${csrfCookie}` },
    body: new URLSearchParams({ _csrf: csrfCookie, email, password: 'a long passphrase 42' }).toString(),
  });
  expect(signedUp.status).toBe(303);
  const session = /parley_session=([^;]+)/.exec(signedUp.headers.get('set-cookie') ?? '')![1];
  for (const g of fleet.gateways) {
    const overview = await fetch(`${g.url}/platform`, { redirect: 'manual', headers: { cookie: `parley_session=${session}` } });
    expect(overview.status).toBe(200);
    expect(await overview.text()).toContain(email);
  }
  const account = (await findAccountByEmail(fleet.redis, email))!.id;
  const grant = await fetch(`${fleet.gateways[1].url}/admin/v1/accounts/${account}/credit`, {
    method: 'POST',
    headers: { ...asAdmin, 'content-type': 'application/json' },
    body: JSON.stringify({ kind: 'grant', amount: '1', note: 'welcome' }),
  });
  expect((await grant.json()).balance).toBe('1.00');
  const [latest] = await (await fetch(`${fleet.gateways[2].url}/admin/v1/audit?count=1`, { headers: asAdmin })).json();
  expect(latest).toMatchObject({ actor: 'admin-token', action: 'credit.grant', target: account, after: { balance: '1.00' } });
}

/**
 * The tenant is served by every replica, and then refused by each once its key is revoked. It is granted credit
 * first: a race may leave its balance short of one request's hold, since a request refused for credit while others'
 * holds were open asks again at its turn, and is served once they are released (gateway/known-refusals.ts).
 */
async function expectRevocationEverywhere(fleet: Fleet, tenant: Tenant): Promise<void> {
  await changeCredit(fleet.redis, tenant.account, 'grant', 1_000, 'the revocation check');
  for (const g of fleet.gateways) expect((await ask(g, tenant.key, false)).status).toBe(200);
  expect(await revokeApiKey(fleet.redis, tenant.keyId)).toBe(true);
  for (const g of fleet.gateways) await until(async () => (await ask(g, tenant.key, false)).status === 401, 2_000);
}

describe('on a Redis Cluster of 3 primaries, each with a replica', () => {
  let cluster: TestCluster;
  let upstream: FakeUpstream;
  let fleet: Fleet;
  const waitTimeout = process.env.REDIS_WAIT_TIMEOUT_MS;
  beforeAll(async () => {
    // A write counts once a replica has it. With every test file running at once on a 2-core machine, a replica
    // can take longer than the default 250 ms; these tests check the books, not WAIT's latency.
    process.env.REDIS_WAIT_TIMEOUT_MS = '2000';
    cluster = await startTestCluster(3, 1);
    upstream = await startFakeUpstream(answering({ prompt_tokens: 10, completion_tokens: 5 }));
    fleet = await startFleet({ kind: 'cluster', nodes: cluster.nodes.split(',').map((n) => ({ host: '127.0.0.1', port: Number(n.split(':')[1]) })) }, upstream);
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    await upstream?.close();
    await cluster?.stop();
    if (waitTimeout === undefined) delete process.env.REDIS_WAIT_TIMEOUT_MS;
    else process.env.REDIS_WAIT_TIMEOUT_MS = waitTimeout;
  });

  it('keeps many accounts on different primaries, each exact under racing requests from 3 replicas; codes credit once; revocation, sessions and the audit log reach every replica', async () => {
    const tenants = await makeTenants(fleet.redis, 8, 300);
    const primaries = new Set(await Promise.all(tenants.map((t) => cluster.primaryOf(redisKeys.account(t.account)))));
    expect(primaries.size).toBeGreaterThan(1);
    const servedBy = await raceForCredit(fleet, tenants, 30);
    await expectBooksExact(fleet, tenants, servedBy);

    const code = await createCreditCode(fleet.redis, 1_000);
    expect(await redeemCreditCode(fleet.redis, tenants[0].account, code)).toEqual({ kind: 'credited', amount: 1_000 });
    expect(await redeemCreditCode(fleet.redis, tenants[0].account, code)).toEqual({ kind: 'already_redeemed' });
    expect(await redeemCreditCode(fleet.redis, tenants[1].account, code)).toEqual({ kind: 'already_redeemed' });
    await expectRevocationEverywhere(fleet, tenants[0]);
    await expectSessionsAndAuditEverywhere(fleet);
    const listed = await runParley(['accounts', 'list', '--data-dir', mkdtempSync(join(tmpdir(), 'parley-op-'))], { REDIS_CLUSTER_NODES: cluster.nodes, PARLEY_KEY_SECRET: TEST_KEY_SECRET });
    for (const t of tenants) expect(listed).toContain(t.account);
  }, 60_000);

  it('loses no money when a primary is killed with -9 under load and its replica takes over', async () => {
    const tenants = await makeTenants(fleet.redis, 6, 1_000_000);
    const load = loadUntilStopped(fleet, tenants, 12);
    await sleep(1_000);
    // Returns once the killed primary's replica serves its slots (it fails the test otherwise).
    await cluster.killPrimary(await cluster.primaryOf(redisKeys.account(tenants[0].account)));
    await sleep(3_000);
    await load.stop();
    // Every node and every replica's client learns the new slot map within seconds: refused meanwhile, served after.
    const probe = async (t: Tenant, i: number) => {
      const ok = await served(await ask(fleet.gateways[i % 3], t.key, false));
      if (ok) load.servedBy.set(t.account, (load.servedBy.get(t.account) ?? 0) + 1);
      return ok;
    };
    await until(async () => (await Promise.all(tenants.map(probe))).every(Boolean), 15_000);
    // A request the failover reaches is refused, or waits it out and is served: which, and how many, is timing.
    const refused = load.answers.filter((a) => a.status !== 200);
    expect(refused.every((a) => a.status === 503 && a.retryAfter === '1')).toBe(true);
    await expectBooksExact(fleet, tenants, load.servedBy);
  }, 90_000);
});

describe('behind Sentinel: a primary, a replica and 3 sentinels', () => {
  let sentinels: TestSentinels;
  let upstream: FakeUpstream;
  let fleet: Fleet;
  beforeAll(async () => {
    sentinels = await startTestSentinels();
    upstream = await startFakeUpstream(answering({ prompt_tokens: 10, completion_tokens: 5 }));
    const hosts = sentinels.sentinels.split(',').map((n) => ({ host: '127.0.0.1', port: Number(n.split(':')[1]) }));
    fleet = await startFleet({ kind: 'sentinel', sentinels: hosts, master: sentinels.master }, upstream);
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    await upstream?.close();
    await sentinels?.stop();
  });

  it('keeps the books exact under racing requests from 3 replicas; revocation, sessions and the audit log reach every replica', async () => {
    const tenants = await makeTenants(fleet.redis, 4, 300);
    await expectBooksExact(fleet, tenants, await raceForCredit(fleet, tenants, 30));
    await expectRevocationEverywhere(fleet, tenants[0]);
    await expectSessionsAndAuditEverywhere(fleet);
    const env = { REDIS_SENTINELS: sentinels.sentinels, REDIS_SENTINEL_MASTER: sentinels.master, PARLEY_KEY_SECRET: TEST_KEY_SECRET };
    expect(await runParley(['accounts', 'list', '--data-dir', mkdtempSync(join(tmpdir(), 'parley-op-'))], env)).toContain(tenants[0].account);
  }, 60_000);

  it('refuses a request whose hold the replica did not take in time (503), and releases that hold', async () => {
    const [tenant] = await makeTenants(fleet.redis, 1, 1_000_000);
    // Generation calls only: the endpoint's health probe may come meanwhile.
    const calls = chatCalls(upstream);
    await sentinels.stallReplica(1_000);
    const res = await ask(fleet.gateways[0], tenant.key, false);
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(chatCalls(upstream)).toBe(calls);
    await until(async () => (await ask(fleet.gateways[0], tenant.key, false)).status === 200, 5_000);
    await until(async () => (await readBalance(fleet.redis, tenant.account))!.held === 0, 5_000);
    await expectBooksExact(fleet, [tenant], new Map([[tenant.account, 1]]));
  }, 30_000);

  it('fails closed while the primary fails over, serves again within 5 s of the promotion, and loses no money', async () => {
    const tenants = await makeTenants(fleet.redis, 4, 1_000_000);
    const load = loadUntilStopped(fleet, tenants, 12);
    await sleep(1_000);
    const promotedAt = await sentinels.killPrimary();
    await until(async () => load.answers.some((a) => a.at > promotedAt && a.status === 200), 5_000).catch(async (err) => {
      // What was answered around the promotion, for whoever reads a failure; the load stops either way.
      console.error('answers since 3 s before the promotion (status, ms after it):', JSON.stringify(load.answers.filter((a) => a.at > promotedAt - 3_000).map((a) => [a.status, a.at - promotedAt])));
      await load.stop();
      throw err;
    });
    const servingAgain = load.answers.find((a) => a.at > promotedAt && a.status === 200)!.at - promotedAt;
    await sleep(1_000);
    await load.stop();
    expect(servingAgain).toBeLessThan(5_000);
    const refused = load.answers.filter((a) => a.status !== 200);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((a) => a.status === 503 && a.retryAfter === '1')).toBe(true);
    await expectBooksExact(fleet, tenants, load.servedBy);
  }, 90_000);
});
