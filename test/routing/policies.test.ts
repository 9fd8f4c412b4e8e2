// The routing policies alone, on plain data.
import { describe, expect, it } from 'vitest';
import { CircuitBreaker, PROBE_CALLER } from '../../src/routing/circuit-breaker.js';
import { EndpointState, QueueTimeout } from '../../src/routing/endpoint-state.js';
import { LeastLoadPolicy } from '../../src/routing/policies/least-load.js';
import type { Candidate, RoutingPolicy } from '../../src/routing/policies/policy.js';
import { PrefixAffinityPolicy } from '../../src/routing/policies/prefix-affinity.js';
import { RoundRobinPolicy } from '../../src/routing/policies/round-robin.js';
import { BLOCK_CHARS, prefixBlocks } from '../../src/routing/prefix-blocks.js';
import { Cancellation } from '../../src/upstream/cancellation.js';

const pool = (...loads: number[]): Candidate[] => loads.map((load, i) => ({ name: `e${i}`, load, weight: 1 }));
const names = (cs: Candidate[]) => cs.map((c) => c.name);
const system = (tenant: number) => ({ role: 'system' as const, content: `Tenant ${tenant} instructions. `.repeat(60) });
const conversation = (tenant: number, question: string) => [system(tenant), { role: 'user' as const, content: question }];

describe('least-load', () => {
  it('puts the least loaded first, relative to weight', () => {
    const policy: RoutingPolicy = new LeastLoadPolicy();
    expect(names(policy.order(pool(3, 1, 2), { prefixBlocks: [] }))).toEqual(['e1', 'e2', 'e0']);
    const weighted = [{ name: 'big', load: 4, weight: 4 }, { name: 'small', load: 2, weight: 1 }];
    expect(policy.order(weighted, { prefixBlocks: [] })[0].name).toBe('big');
  });

  it('rotates among equally loaded endpoints', () => {
    const policy: RoutingPolicy = new LeastLoadPolicy();
    const firsts = Array.from({ length: 6 }, () => policy.order(pool(0, 0, 0), { prefixBlocks: [] })[0].name);
    expect(new Set(firsts)).toEqual(new Set(['e0', 'e1', 'e2']));
  });
});

describe('round-robin', () => {
  it('gives each endpoint its weight\'s share, interleaved', () => {
    const policy: RoutingPolicy = new RoundRobinPolicy();
    const candidates = [{ name: 'a', load: 0, weight: 3 }, { name: 'b', load: 0, weight: 1 }];
    const picks = Array.from({ length: 8 }, () => policy.order(candidates, { prefixBlocks: [] })[0].name);
    expect(picks.filter((p) => p === 'a')).toHaveLength(6);
    expect(picks.join('')).not.toContain('aaaa');
  });
});

describe('prefix blocks', () => {
  it('share their leading hashes exactly as far as two conversations share their text', () => {
    const a = prefixBlocks(conversation(1, 'What is a token?'));
    const b = prefixBlocks(conversation(1, 'How do caches work?'));
    const c = prefixBlocks(conversation(2, 'What is a token?'));
    // "system\n" + the system prompt + "\n\nuser\n" is the text both share.
    const sharedChars = `system\n${system(1).content}\n\nuser\n`.length;
    expect(a.findIndex((h, i) => h !== b[i])).toBe(Math.floor(sharedChars / BLOCK_CHARS));
    expect(a[0]).not.toBe(c[0]);
  });

  it('hash a short conversation as one block', () => {
    expect(prefixBlocks([{ role: 'user', content: 'hi' }])).toHaveLength(1);
  });
});

describe('prefix affinity', () => {
  it('sends a tenant\'s requests to the endpoint that served its prefix', () => {
    const policy = new PrefixAffinityPolicy({ maxImbalance: 4 });
    const first = prefixBlocks(conversation(1, 'first question'));
    const chosen = policy.order(pool(0, 0, 0), { prefixBlocks: first })[0];
    policy.onRouted(chosen.name, { prefixBlocks: first });
    for (const question of ['second', 'third', 'fourth']) {
      const loads = pool(1, 1, 1);
      expect(policy.order(loads, { prefixBlocks: prefixBlocks(conversation(1, question)) })[0].name).toBe(chosen.name);
    }
  });

  it('spreads new tenants evenly over the pool, the same way every time', () => {
    const place = (policy: PrefixAffinityPolicy) =>
      Array.from({ length: 12 }, (_, t) => {
        const request = { prefixBlocks: prefixBlocks(conversation(t, 'q')) };
        const home = policy.order(pool(0, 0, 0), request)[0].name;
        policy.onRouted(home, request);
        return home;
      });
    const homes = place(new PrefixAffinityPolicy({ maxImbalance: 4 }));
    for (const e of ['e0', 'e1', 'e2']) expect(homes.filter((h) => h === e)).toHaveLength(4);
    expect(place(new PrefixAffinityPolicy({ maxImbalance: 4 }))).toEqual(homes);
  });

  it('spills to the least loaded when the home is busier by more than maxImbalance, and remembers the new home', () => {
    const policy = new PrefixAffinityPolicy({ maxImbalance: 2 });
    const blocks = { prefixBlocks: prefixBlocks(conversation(1, 'q')) };
    policy.onRouted('e0', blocks);
    expect(policy.order(pool(2, 0, 1), blocks)[0].name).toBe('e0');
    const spilled = policy.order(pool(3, 0, 1), blocks)[0].name;
    expect(spilled).toBe('e1');
    policy.onRouted(spilled, blocks);
    expect(policy.order(pool(0, 1, 0), blocks)[0].name).toBe('e1');
  });

  it('prefers the endpoint holding the longest matching prefix', () => {
    const policy = new PrefixAffinityPolicy({ maxImbalance: 4 });
    const turn1 = conversation(1, 'q1');
    const turn2 = [...turn1, { role: 'assistant' as const, content: 'a1 '.repeat(100) }, { role: 'user' as const, content: 'q2' }];
    policy.onRouted('e0', { prefixBlocks: prefixBlocks([system(1)]) });
    policy.onRouted('e2', { prefixBlocks: prefixBlocks(turn2) });
    const turn3 = [...turn2, { role: 'assistant' as const, content: 'a2' }, { role: 'user' as const, content: 'q3' }];
    expect(policy.order(pool(0, 0, 0), { prefixBlocks: prefixBlocks(turn3) })[0].name).toBe('e2');
  });
});

describe('circuit breaker', () => {
  const settings = { failureThreshold: 3, failureRate: 0.5, windowMs: 10_000, minCallers: 2, openMs: 1000 };

  it('opens on failures from several accounts within the window, half-opens for one trial, and closes on success', () => {
    let now = 0;
    const breaker = new CircuitBreaker(settings, () => now);
    breaker.onFailure('team-a');
    breaker.onFailure('team-b');
    expect(breaker.state).toBe('closed');
    breaker.onFailure('team-a');
    expect(breaker.state).toBe('open');
    expect(breaker.allowRequest()).toBe(false);
    now = 1000;
    expect(breaker.state).toBe('half_open');
    expect(breaker.allowRequest()).toBe(true);
    expect(breaker.allowRequest()).toBe(false);
    breaker.onSuccess('team-c');
    expect(breaker.state).toBe('closed');
  });

  it("stays closed however many of one account's requests fail", () => {
    const breaker = new CircuitBreaker(settings);
    for (let i = 0; i < 100; i++) breaker.onFailure('attacker');
    expect(breaker.state).toBe('closed');
  });

  it('stays closed while failures are under the failure rate of the window', () => {
    const breaker = new CircuitBreaker(settings);
    for (let i = 0; i < 10; i++) {
      breaker.onSuccess('team-a');
      breaker.onSuccess('team-b');
      breaker.onSuccess('team-c');
      breaker.onFailure(i % 2 ? 'team-a' : 'team-b');
    }
    expect(breaker.state).toBe('closed');
  });

  it('forgets outcomes older than the window', () => {
    let now = 0;
    const breaker = new CircuitBreaker(settings, () => now);
    breaker.onFailure('team-a');
    breaker.onFailure('team-b');
    now = 10_001;
    breaker.onFailure('team-a');
    expect(breaker.state).toBe('closed');
  });

  it('opens on failed probes in a row alone, and a probe counts as a caller of its own', () => {
    const probed = new CircuitBreaker(settings);
    probed.onFailure(PROBE_CALLER);
    probed.onFailure(PROBE_CALLER);
    expect(probed.state).toBe('closed');
    probed.onFailure(PROBE_CALLER);
    expect(probed.state).toBe('open');

    const confirmed = new CircuitBreaker(settings);
    confirmed.onFailure('team-a');
    confirmed.onFailure('team-a');
    confirmed.onFailure(PROBE_CALLER);
    expect(confirmed.state).toBe('open');
  });

  it('opens at once on a refused connection, and again after a failed trial', () => {
    let now = 0;
    const breaker = new CircuitBreaker(settings, () => now);
    breaker.onFailure('team-a', true);
    expect(breaker.state).toBe('open');
    now = 1500;
    expect(breaker.allowRequest()).toBe(true);
    breaker.onFailure('team-a');
    expect(breaker.state).toBe('open');
  });

  it('frees the half-open trial of a request that had nothing to say of the endpoint', () => {
    let now = 0;
    const breaker = new CircuitBreaker(settings, () => now);
    breaker.onFailure('team-a', true);
    now = 1000;
    expect(breaker.allowRequest()).toBe(true);
    breaker.onNoVerdict();
    expect(breaker.state).toBe('half_open');
    expect(breaker.allowRequest()).toBe(true);
  });
});

const BREAKER = { failureThreshold: 3, failureRate: 0.5, windowMs: 10_000, minCallers: 2, openMs: 1000 };

describe('endpoint concurrency', () => {
  it('admits up to maxConcurrent, queues the next in order, and hands a released slot to the first waiter', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 2, accountQueueShare: 1 }, BREAKER);
    expect(state.tryAcquire()).toBe(true);
    expect(state.tryAcquire()).toBe(false);
    const order: string[] = [];
    const a = state.acquireQueued('team', 1000, new Cancellation()).then(() => order.push('a'));
    const b = state.acquireQueued('team', 1000, new Cancellation()).then(() => order.push('b'));
    expect(state.load).toBe(3);
    expect(state.hasQueueRoom('team')).toBe(false);
    state.release();
    await a;
    state.release();
    await b;
    expect(order).toEqual(['a', 'b']);
    expect(state.inFlight).toBe(1);
  });

  it('gives up waiting after the queue timeout', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 1, accountQueueShare: 1 }, BREAKER);
    state.tryAcquire();
    await expect(state.acquireQueued('team', 30, new Cancellation())).rejects.toBeInstanceOf(QueueTimeout);
    expect(state.queued).toBe(0);
  });

  it('leaves the queue at once when its request is cancelled, and a slot released later goes to the next', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 2, accountQueueShare: 1 }, BREAKER);
    state.tryAcquire();
    const leaving = new Cancellation();
    const left = state.acquireQueued('team', 10_000, leaving);
    const staying = state.acquireQueued('team', 10_000, new Cancellation());
    leaving.cancel();
    await expect(left).rejects.toMatchObject({ name: 'AbortError' });
    expect(state.queued).toBe(1);
    state.release();
    await staying;
    expect(state.inFlight).toBe(1);
  });

  it('refuses at once, taking no place in the queue, a request cancelled before it began to wait', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 2, accountQueueShare: 1 }, BREAKER);
    state.tryAcquire();
    const gone = new Cancellation();
    gone.cancel();
    await expect(state.acquireQueued('team', 20, gone)).rejects.toMatchObject({ name: 'AbortError' });
    expect(state.queued).toBe(0);
    // Past the queue timeout nothing else fires: an error thrown from a timer would fail this test as uncaught.
    await new Promise((r) => setTimeout(r, 50));
    state.release();
    expect(state.inFlight).toBe(0);
  });

  it("lets one account take only its share of the queue, leaving room for the others", () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 4, accountQueueShare: 0.5 }, BREAKER);
    state.tryAcquire();
    const waits = [state.acquireQueued('burst', 1000, new Cancellation()), state.acquireQueued('burst', 1000, new Cancellation())];
    expect(state.hasQueueRoom('burst')).toBe(false);
    expect(state.hasQueueRoom('other')).toBe(true);
    for (let i = 0; i < 3; i++) state.release();
    return Promise.all(waits);
  });

  it('hands freed slots to the accounts waiting in turn, not in arrival order', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 8, accountQueueShare: 1 }, BREAKER);
    state.tryAcquire();
    const order: string[] = [];
    const waits = ['a1', 'a2', 'a3', 'b1', 'c1'].map((w) => state.acquireQueued(w[0], 1000, new Cancellation()).then(() => order.push(w)));
    for (let i = 0; i < 5; i++) {
      state.release();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(waits);
    expect(order).toEqual(['a1', 'b1', 'c1', 'a2', 'a3']);
  });
});

describe('the router across reloads', () => {
  it('gives a kept endpoint the new health settings and keeps its circuit', async () => {
    const { Router } = await import('../../src/routing/router.js');
    const { buildRoutingTable } = await import('../../src/routing/routing-table.js');
    const { parseRoutingFile } = await import('../../src/config.js');
    const table = (failureThreshold: number) =>
      buildRoutingTable(
        parseRoutingFile(JSON.stringify({
          gateway: { health: { failureThreshold, probe: { intervalMs: 0 } } },
          models: [{ id: 'm', contextWindow: 1024, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 1, output: 1 }, endpoints: [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }] }],
        }), 'routing.json', '.'),
        { start: () => Promise.reject(new Error('no local engines here')) } as never,
      );
    const router = new Router();
    try {
      const first = await table(3);
      router.apply(first);
      const endpoint = first.models.get('m')!.endpoints[0];
      router.state(endpoint).breaker.onFailure(PROBE_CALLER);
      expect(router.state(endpoint).breaker.state).toBe('closed');
      router.apply(await table(2));
      router.state(endpoint).breaker.onFailure(PROBE_CALLER);
      expect(router.state(endpoint).breaker.state).toBe('open');
    } finally {
      router.close();
    }
  });
});
