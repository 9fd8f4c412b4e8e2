// Starts a real gateway in the test process on a routing file the test
// writes, with its own redis-server and an account holding credit, and an
// `openai` client pointed at it with that account's key.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { stringify } from 'yaml';
import { createAccount } from '../../src/accounts/accounts.js';
import { createApiKey } from '../../src/accounts/api-keys.js';
import { changeCredit } from '../../src/billing/credit-ledger.js';
import { startGateway, type RunningGateway } from '../../src/gateway/start.js';
import { startFakeUpstream, type FakeUpstream, type Script } from './fake-upstream.js';
import { startTestRedis, type TestRedis } from './redis.js';

export const TEST_KEY_SECRET = 'test-secret-for-hashing-api-keys-0123456789';

/** The admin token vitest.config.ts sets, as a request sends it. */
export const asAdmin = { authorization: `Bearer ${process.env.PARLEY_ADMIN_TOKEN}` };

export interface TestGateway extends RunningGateway {
  client: OpenAI;
  apiKey: string;
  account: string;
  redis: TestRedis;
  configPath: string;
  dataDir: string;
  writeConfig(config: unknown): void;
}

export function modelEntry(id: string, endpoints: unknown[], extra: Record<string, unknown> = {}) {
  return {
    id,
    contextWindow: 4096,
    pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 },
    endpoints,
    ...extra,
  };
}

/** An account with `credit` (in currency units) and one key. */
export async function makeAccount(redis: TestRedis, credit: number, email = `team-${Math.random().toString(36).slice(2)}@example.com`) {
  const account = await createAccount(redis.client, { email });
  if (credit > 0) await changeCredit(redis.client, account.id, 'grant', Math.round(credit * 1_000_000), 'test credit');
  const { key, record } = await createApiKey(redis.client, TEST_KEY_SECRET, account.id, 'test');
  return { account: account.id, key, keyId: record.id };
}

let newTestRedis: () => Promise<TestRedis> = startTestRedis;

/** Where the gateways a test file starts from now on get their own Redis: a cluster, sentinels (a suite run on each). */
export function startGatewaysOn(start: () => Promise<TestRedis>): void {
  newTestRedis = start;
}

export interface TestGatewayOptions {
  /** Share a redis-server (and so accounts) with another gateway: a second replica, whose client is another account's. */
  redis?: TestRedis;
  /** Another replica of this gateway: its redis-server, and its client calls with the same account and key, as one tenant reaches any replica. */
  replicaOf?: TestGateway;

  dataDir?: string;
  credit?: number;
  /** Serve GET /metrics on a port of its own (0: any free one), at the gateway's `metricsUrl`. */
  metricsPort?: number;
}

export async function startTestGateway(config: unknown, opts: TestGatewayOptions = {}): Promise<TestGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'parley-test-'));
  const configPath = join(dir, 'routing.yaml');
  // A test's output stays readable: no request log lines unless the test asks for them. Nor are scripted
  // upstreams asked for their engine load (a GET /metrics a script would have to answer) unless the test asks.
  const quiet = (c: unknown) => {
    const file = c as { gateway?: { requestLog?: boolean } };
    return { ...file, gateway: { requestLog: false, engineLoad: { intervalMs: 0 }, ...file.gateway } };
  };
  const writeConfig = (c: unknown) => writeFileSync(configPath, stringify(quiet(c)));
  writeConfig(config);
  const data = opts.dataDir ?? join(dir, 'data');
  const redis = opts.replicaOf?.redis ?? opts.redis ?? (await newTestRedis());
  const gateway = await startGateway({ configPath, dataDir: data, host: '127.0.0.1', port: 0, redis: redis.shared ?? { kind: 'server', url: redis.url }, keySecret: TEST_KEY_SECRET, metricsPort: opts.metricsPort });
  const { account, key } = opts.replicaOf ? { account: opts.replicaOf.account, key: opts.replicaOf.apiKey } : await makeAccount(redis, opts.credit ?? 100);
  const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key, maxRetries: 0 });
  return {
    ...gateway,
    client,
    apiKey: key,
    account,
    redis,
    configPath,
    dataDir: data,
    writeConfig,
    // Tests end with requests still hanging on scripted upstreams: no grace unless a test asks for it.
    close: async (graceMs = 0) => {
      await gateway.close(graceMs);
      if (!opts.redis && !opts.replicaOf) await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface GatewayOnUpstreams {
  gw: TestGateway;
  upstreams: FakeUpstream[];
  close(): Promise<void>;
}

/** Scripted upstreams and a gateway on the routing file `config` makes of their URLs. */
export async function startGatewayOn(scripts: Script[], config: (urls: string[]) => unknown, opts: TestGatewayOptions = {}): Promise<GatewayOnUpstreams> {
  const upstreams = await Promise.all(scripts.map((s) => startFakeUpstream(s)));
  const gw = await startTestGateway(config(upstreams.map((u) => u.url)), opts);
  return {
    gw,
    upstreams,
    close: async () => {
      await gw.close();
      await Promise.all(upstreams.map((u) => u.close()));
    },
  };
}

export interface FleetOnUpstreams extends GatewayOnUpstreams {
  /** Every replica, the first (`gw`, which owns the Redis) first. */
  replicas: TestGateway[];
}

/** Scripted upstreams and `count` gateway replicas on one Redis, each on the routing file `config` makes of their URLs. */
export async function startFleetOn(scripts: Script[], config: (urls: string[]) => unknown, count: number): Promise<FleetOnUpstreams> {
  const running = await startGatewayOn(scripts, config);
  const replicas = [running.gw];
  while (replicas.length < count) replicas.push(await startTestGateway(config(running.upstreams.map((u) => u.url)), { replicaOf: running.gw }));
  return {
    ...running,
    replicas,
    close: async () => {
      for (const replica of replicas.slice(1)) await replica.close();
      await running.close();
    },
  };
}

/** Runs `run` against startGatewayOn's gateway and upstreams, stopping them after, whatever happens. */
export async function withGatewayOn<T>(
  scripts: Script[],
  config: (urls: string[]) => unknown,
  run: (gw: TestGateway, upstreams: FakeUpstream[]) => Promise<T>,
  opts: TestGatewayOptions = {},
): Promise<T> {
  const { gw, upstreams, close } = await startGatewayOn(scripts, config, opts);
  try {
    return await run(gw, upstreams);
  } finally {
    await close();
  }
}

/** Raw POST to the gateway, for what the openai client hides (status, headers, raw SSE text). */
export async function postChat(gateway: Pick<TestGateway, 'url' | 'apiKey'>, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.apiKey}`, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}
