// An endpoint's maxConcurrent holds for the fleet under everything that ends
// a request early: three replicas on one Redis, tenants whose holds are
// refused, clients that leave mid-request, requests that fail on one
// endpoint and fail over to the other, and a Redis restart between waves.
// The upstreams count what they have open at once; at the end no lease is
// left in Redis and no replica counts a request in flight.
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POLL_MS } from '../../src/routing/admission-rule.js';
import { completionBody, replyJson, sleep, type ReceivedRequest } from '../support/fake-upstream.js';
import { asAdmin, makeAccount, modelEntry, startFleetOn, type FleetOnUpstreams, type TestGateway } from '../support/gateway.js';

const MAX_CONCURRENT = 2;
const messages = (content: string) => [{ role: 'user', content }];

/** An upstream that counts the requests it has open at once; it fails those whose prompt says FAIL, when told to. */
function countingUpstream(failing: boolean) {
  const counts = { open: 0, most: 0 };
  const script = async (req: ReceivedRequest, res: ServerResponse) => {
    if (req.path.endsWith('/models')) return replyJson(res, { object: 'list', data: [] });
    counts.open++;
    counts.most = Math.max(counts.most, counts.open);
    res.once('close', () => counts.open--);
    await sleep(40);
    if (failing && JSON.stringify(req.body.messages).includes('FAIL')) return replyJson(res, { error: { message: 'CUDA error' } }, 500);
    replyJson(res, completionBody('ok', { prompt_tokens: 5, completion_tokens: 1 }));
  };
  return { counts, script };
}

const first = countingUpstream(true);
const second = countingUpstream(false);
let running: FleetOnUpstreams;
let replicas: TestGateway[];
const config = ([a, b]: string[]) => ({
  gateway: { failover: { queueTimeoutMs: 5_000 } },
  models: [modelEntry('m', [{ kind: 'vllm', url: a, maxConcurrent: MAX_CONCURRENT }, { kind: 'vllm', url: b, maxConcurrent: MAX_CONCURRENT, priority: 1 }])],
});

beforeAll(async () => {
  running = await startFleetOn([first.script, second.script], config, 3);
  replicas = running.replicas;
});
afterAll(() => running.close());

/** One request of the mix: `kind` says how it ends. */
async function send(replica: TestGateway, key: string, kind: 'served' | 'fails-over' | 'leaves', i: number): Promise<number> {
  const abort = new AbortController();
  if (kind === 'leaves') setTimeout(() => abort.abort(), 15 + (i % 30));
  try {
    const res = await fetch(`${replica.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: 'm', messages: messages(kind === 'fails-over' ? `FAIL ${i}` : `hello ${i}`), max_tokens: 4 }),
      signal: abort.signal,
    });
    await res.text();
    return res.status;
  } catch {
    return 0;
  }
}

async function wave(keys: { funded: string[]; broke: string }, size: number): Promise<number[]> {
  const kinds = ['served', 'fails-over', 'leaves'] as const;
  return Promise.all(
    Array.from({ length: size }, (_, i) => {
      const replica = replicas[i % replicas.length];
      // Every fifth request is from an account with no credit: its hold is refused.
      const key = i % 5 === 4 ? keys.broke : keys.funded[i % keys.funded.length];
      return send(replica, key, kinds[i % kinds.length], i);
    }),
  );
}

async function leasesInRedis(): Promise<number> {
  const client = running.gw.redis.client;
  let held = 0;
  for (const key of await client.keys('*slots:*leases*')) held += await client.zcard(key);
  return held;
}

async function inFlight(replica: TestGateway): Promise<number[]> {
  const view = await (await fetch(`${replica.url}/admin/endpoints`, { headers: asAdmin })).json();
  return view.data[0].endpoints.map((e: { inFlight: number }) => e.inFlight);
}

describe('maxConcurrent across three replicas', () => {
  it('holds under refused holds, cancellations, failovers and a Redis restart, and leaves no lease behind', async () => {
    const redis = running.gw.redis;
    const funded = await Promise.all([0, 1, 2, 3].map(() => makeAccount(redis, 10)));
    const broke = await makeAccount(redis, 0);
    const keys = { funded: funded.map((a) => a.key), broke: broke.key };

    const before = await wave(keys, 45);
    expect(before.filter((s) => s === 200).length).toBeGreaterThan(10);
    expect(before.filter((s) => s === 402).length).toBeGreaterThan(0);

    await redis.kill();
    const during = await wave(keys, 15);
    expect(during.every((s) => s === 503 || s === 0)).toBe(true);
    await redis.restart();
    // Each replica finds Redis again (its readiness says so).
    for (const replica of replicas) await expect.poll(async () => (await fetch(`${replica.url}/readyz`)).status, { timeout: 10_000 }).toBe(200);

    const after = await wave(keys, 45);
    expect(after.filter((s) => s === 200).length).toBeGreaterThan(10);

    expect(first.counts.most).toBeLessThanOrEqual(MAX_CONCURRENT);
    expect(second.counts.most).toBeLessThanOrEqual(MAX_CONCURRENT);
    expect(first.counts.most).toBe(MAX_CONCURRENT);
    // Spare leases go back a poll after their grant, and releases Redis missed while it was away with the next
    // renewal (every 5 s); then nothing is held anywhere.
    await sleep(POLL_MS * 3);
    await expect.poll(leasesInRedis, { timeout: 10_000 }).toBe(0);
    for (const replica of replicas) expect(await inFlight(replica)).toEqual([0, 0]);
    expect(first.counts.open + second.counts.open).toBe(0);
  });
});
