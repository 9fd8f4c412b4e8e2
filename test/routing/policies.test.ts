// The routing policies alone, on plain data.
import { describe, expect, it } from 'vitest';
import { CircuitBreaker, PROBE_CALLER } from '../../src/routing/circuit-breaker.js';
import { EndpointState, QueueTimeout, Slot } from '../../src/routing/endpoint-state.js';
import { mayAdmit, flexLimit, PEAK_WINDOW_MS, POLL_MS } from '../../src/routing/admission-rule.js';
import { LeastLoadPolicy } from '../../src/routing/policies/least-load.js';
import type { Candidate, RoutingPolicy } from '../../src/routing/policies/policy.js';
import { KnownPrefixes } from '../../src/routing/known-prefixes.js';
import { PrefixAffinityPolicy } from '../../src/routing/policies/prefix-affinity.js';
import { PrefixPlacement, rendezvousOrder, type PlacementEndpoint } from '../../src/routing/prefix-placement.js';
import { RoundRobinPolicy } from '../../src/routing/policies/round-robin.js';
import { conversationKey, hintKey, leadingTextKey } from '../../src/routing/affinity-key.js';
import { Cancellation } from '../../src/upstream/cancellation.js';
import type { ChatMessage } from '../../src/protocol/chat-request.js';

const pool = (...loads: number[]): Candidate[] => loads.map((load, i) => ({ name: `e${i}`, load, weight: 1 }));
const names = (cs: Candidate[]) => cs.map((c) => c.name);
const system = (tenant: number) => ({ role: 'system' as const, content: `Tenant ${tenant} instructions. `.repeat(60) });
const conversation = (tenant: number, question: string) => [system(tenant), { role: 'user' as const, content: question }];

describe('least-load', () => {
  it('puts the least loaded first, relative to weight', () => {
    const policy: RoutingPolicy = new LeastLoadPolicy();
    expect(names(policy.order(pool(3, 1, 2), {}))).toEqual(['e1', 'e2', 'e0']);
    const weighted = [{ name: 'big', load: 4, weight: 4 }, { name: 'small', load: 2, weight: 1 }];
    expect(policy.order(weighted, {})[0].name).toBe('big');
  });

  it('rotates among equally loaded endpoints', () => {
    const policy: RoutingPolicy = new LeastLoadPolicy();
    const firsts = Array.from({ length: 6 }, () => policy.order(pool(0, 0, 0), {})[0].name);
    expect(new Set(firsts)).toEqual(new Set(['e0', 'e1', 'e2']));
  });
});

describe('round-robin', () => {
  it('gives each endpoint its weight\'s share, interleaved', () => {
    const policy: RoutingPolicy = new RoundRobinPolicy();
    const candidates = [{ name: 'a', load: 0, weight: 3 }, { name: 'b', load: 0, weight: 1 }];
    const picks = Array.from({ length: 8 }, () => policy.order(candidates, {})[0].name);
    expect(picks.filter((p) => p === 'a')).toHaveLength(6);
    expect(picks.join('')).not.toContain('aaaa');
  });
});

describe('affinity keys', () => {
  const session = (task: string, turns: number) => {
    const messages: ChatMessage[] = [system(0), { role: 'user', content: task }];
    for (let t = 1; t < turns; t++) messages.push({ role: 'assistant', content: `step ${t} done` }, { role: 'user', content: `go on with step ${t + 1}` });
    return messages;
  };

  it("key a tenant's single questions alike, by the leading text its system prompt fills", () => {
    expect(conversationKey(conversation(1, 'What is a token?'))).toBe(conversationKey(conversation(1, 'How do caches work?')));
    expect(conversationKey(conversation(1, 'What is a token?'))).not.toBe(conversationKey(conversation(2, 'What is a token?')));
  });

  it('key each agent session by its opening, the same at every turn, and apart from the sessions that share its system prompt', () => {
    const keys = [2, 5, 30].map((turns) => conversationKey(session('fix the failing test in parser.ts', turns)));
    expect(new Set(keys).size).toBe(1);
    expect(conversationKey(session('rename the config loader', 2))).not.toBe(keys[0]);
  });

  it('read an opening past the first 512 characters, as far as 64 KB', () => {
    const long = { role: 'system' as const, content: 'Shared agent instructions. '.repeat(2000) };
    const opening = (task: string): ChatMessage[] => [long, { role: 'user', content: task }, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'next' }];
    expect(conversationKey(opening('task one'))).not.toBe(conversationKey(opening('task two')));
  });

  it('keep hints, leading texts and conversations apart', () => {
    expect(new Set([hintKey('abc'), leadingTextKey('abc'), conversationKey([{ role: 'user', content: 'abc' }])]).size).toBe(3);
  });
});

describe('prefix placement', () => {
  const fleet = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `m http://gpu-${i}.inference:8000/v1`, weight: 1 }));
  const keys = Array.from({ length: 2000 }, (_, i) => `prefix-${i}`);
  const movedShare = (a: PrefixPlacement<PlacementEndpoint>, b: PrefixPlacement<PlacementEndpoint>) => keys.filter((k) => a.homeOf(k)!.name !== b.homeOf(k)!.name).length / keys.length;

  it('spreads a few prefixes exactly evenly: 8 over 4 endpoints is 2 each', () => {
    const tenants = Array.from({ length: 8 }, (_, i) => `tenant-${i}`);
    const placement = new PrefixPlacement(tenants, fleet(4), 0.25);
    const homes = tenants.map((t) => placement.homeOf(t)!.name);
    for (const e of fleet(4)) expect(homes.filter((h) => h === e.name)).toHaveLength(2);
  });

  it('keeps many prefixes within their share plus the slack', () => {
    const placement = new PrefixPlacement(keys, fleet(10), 0.25);
    const counts = new Map<string, number>();
    for (const k of keys) counts.set(placement.homeOf(k)!.name, (counts.get(placement.homeOf(k)!.name) ?? 0) + 1);
    expect(Math.max(...counts.values())).toBeLessThanOrEqual(250);
  });

  it('gives an endpoint of weight 2 twice the prefixes', () => {
    const weighted = [{ name: 'big', weight: 2 }, { name: 'small', weight: 1 }];
    const placement = new PrefixPlacement(keys, weighted, 0.25);
    const big = keys.filter((k) => placement.homeOf(k)!.name === 'big').length;
    expect(big / keys.length).toBeGreaterThan(0.6);
    expect(big / keys.length).toBeLessThan(0.72);
  });

  it('moves about 1/N of the prefixes when an endpoint is added or removed, not all of them', () => {
    for (const n of [4, 10]) {
      const before = new PrefixPlacement(keys, fleet(n), 0.25);
      expect(movedShare(before, new PrefixPlacement(keys, fleet(n + 1), 0.25))).toBeLessThan(1.5 / (n + 1));
      expect(movedShare(before, new PrefixPlacement(keys, fleet(n).slice(1), 0.25))).toBeLessThan(1.5 / n);
    }
  });

  it('keeps the homes of the prefixes it knows when a new one arrives', () => {
    const before = new PrefixPlacement(keys.slice(0, 1999), fleet(8), 0.25);
    const after = new PrefixPlacement(keys, fleet(8), 0.25);
    expect(keys.slice(0, 1999).filter((k) => before.homeOf(k)!.name !== after.homeOf(k)!.name).length).toBeLessThan(20);
    expect(after.homeOf(keys[1999])!.name).toBe(before.homeOf(keys[1999])!.name);
  });

  it('ranks the endpoints in each prefix\'s own order, whatever order they are listed in', () => {
    const endpoints = fleet(6);
    expect(names(rendezvousOrder('k', endpoints.map((e) => ({ ...e, load: 0 }))))).toEqual(names(rendezvousOrder('k', [...endpoints].reverse().map((e) => ({ ...e, load: 0 })))));
  });
});

describe('prefix affinity', () => {
  const settings = { loadFactor: 1.25, maxImbalance: 2, placementSlack: 0.25, prefillTokensPerSecond: 10_000 };
  const requestOf = (tenant: number, question = 'q') => ({ key: conversationKey(conversation(tenant, question)) });

  it("sends a tenant's requests to one endpoint", () => {
    const policy = new PrefixAffinityPolicy(settings);
    const home = policy.order(pool(0, 0, 0), requestOf(1, 'first'))[0].name;
    for (const question of ['second', 'third', 'fourth']) expect(policy.order(pool(1, 1, 1), requestOf(1, question))[0].name).toBe(home);
  });

  it('places alike on every replica that knows the same prefixes in the same order, whatever order each saw them in', () => {
    const replicas = [new KnownPrefixes(), new KnownPrefixes()];
    const policies = replicas.map((known) => new PrefixAffinityPolicy(settings, known));
    const tenants = Array.from({ length: 8 }, (_, t) => t);
    tenants.forEach((t) => policies[0].order(pool(0, 0, 0, 0), requestOf(t)));
    [...tenants].reverse().forEach((t) => policies[1].order(pool(0, 0, 0, 0), requestOf(t)));
    // What sharing through Redis does: both take the fleet's first-seen order.
    const fleetOrder = [...replicas[0].keys()];
    replicas.forEach((known) => known.merge({ whole: true, added: fleetOrder.map((key, place) => [key, place]), forgotten: [] }));
    const homes = policies.map((policy) => tenants.map((t) => policy.order(pool(0, 0, 0, 0), requestOf(t, 'later'))[0].name));
    expect(homes[1]).toEqual(homes[0]);
    for (const e of ['e0', 'e1', 'e2', 'e3']) expect(homes[0].filter((h) => h === e)).toHaveLength(2);
  });

  it("spills past a busy home to the next endpoint in the prefix's own order, the same one on every replica", () => {
    const policies = [new PrefixAffinityPolicy(settings), new PrefixAffinityPolicy(settings)];
    const request = requestOf(3);
    const home = policies[0].order(pool(0, 0, 0, 0), request)[0].name;
    const busy = pool(0, 0, 0, 0).map((c) => (c.name === home ? { ...c, load: 6 } : c));
    const spills = policies.map((policy) => policy.order(busy, request)[0].name);
    expect(spills[0]).not.toBe(home);
    expect(spills[1]).toBe(spills[0]);
    expect(spills[0]).toBe(rendezvousOrder(request.key, busy).filter((c) => c.name !== home)[0].name);
  });

  it('spreads a single hot prefix over as many endpoints as its load needs, not one', () => {
    const policy = new PrefixAffinityPolicy(settings);
    const candidates = pool(0, 0, 0, 0, 0, 0);
    for (let i = 0; i < 60; i++) {
      const chosen = policy.order(candidates, requestOf(7))[0];
      chosen.load++;
    }
    const loads = candidates.map((c) => c.load).sort((a, b) => b - a);
    expect(loads.filter((l) => l > 0).length).toBeGreaterThanOrEqual(5);
    expect(loads[0]).toBeLessThanOrEqual(Math.ceil(1.25 * 10) + 2);
  });

  it('routes a key it is not to keep by its rendezvous order, and keeps nothing of it', () => {
    const known = new KnownPrefixes();
    const policy = new PrefixAffinityPolicy(settings, known);
    const request = { ...requestOf(5), unkept: true };
    const idle = pool(0, 0, 0, 0);
    expect(policy.order(idle, request)[0].name).toBe(rendezvousOrder(request.key, idle)[0].name);
    expect(known.keys()).toHaveLength(0);
    expect(known.takeUnsharedMoves()).toHaveLength(0);
  });

  it('stays at home while it is busier than the rest by fewer than maxImbalance requests', () => {
    const policy = new PrefixAffinityPolicy(settings);
    const request = requestOf(2);
    const home = policy.order(pool(0, 0, 0), request)[0].name;
    const slightlyBusy = pool(0, 0, 0).map((c) => (c.name === home ? { ...c, load: 2 } : c));
    expect(policy.order(slightlyBusy, request)[0].name).toBe(home);
  });
});

describe('circuit breaker', () => {
  const settings = { failureThreshold: 3, failureRate: 0.5, windowMs: 10_000, minCallers: 2, openMs: 1000 };

  /** A breaker whose suspicions are counted, for the test to settle with a probe's outcome. */
  function verified(now: () => number = Date.now) {
    const breaker = new CircuitBreaker(settings, now);
    const asked = { probes: 0 };
    breaker.verify = () => asked.probes++;
    return { breaker, asked };
  }

  it('suspects on failures from several accounts within the window and opens when the probe fails, half-opens for one trial, and closes on success', () => {
    let now = 0;
    const { breaker, asked } = verified(() => now);
    breaker.onFailure('team-a');
    breaker.onFailure('team-b');
    expect(asked.probes).toBe(0);
    breaker.onFailure('team-a');
    breaker.onFailure('team-b');
    expect(asked.probes).toBe(1);
    expect(breaker.state).toBe('closed');
    breaker.onFailure(PROBE_CALLER);
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

  it("suspects on one account's failures that another endpoint did not repeat", () => {
    const { breaker, asked } = verified();
    for (let i = 0; i < 2; i++) breaker.onFailure('team-a', false, true);
    expect(asked.probes).toBe(0);
    breaker.onFailure('team-a', false, true);
    expect(asked.probes).toBe(1);
    breaker.onFailure(PROBE_CALLER);
    expect(breaker.state).toBe('open');
  });

  it('never opens on requests that fail while the endpoint serves others or its probe: the failures were the requests\' own', () => {
    const { breaker, asked } = verified();
    for (let i = 0; i < 100; i++) {
      breaker.onFailure(`team-${i % 10}`);
      breaker.onFailure(`team-${(i + 1) % 10}`, false, true);
      breaker.onFailure(`team-${(i + 2) % 10}`);
      // The probe asked for answers; or another tenant's request is served meanwhile.
      if (i % 2) breaker.onSuccess(PROBE_CALLER);
      else breaker.onSuccess('team-innocent');
    }
    expect(asked.probes).toBe(100);
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
    let probes = 0;
    breaker.verify = () => probes++;
    breaker.onFailure('team-a');
    expect(probes).toBe(1);
    breaker.onFailure(PROBE_CALLER);
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

describe('endpoint cache share', () => {
  it('is the share of the last 5 minutes, so that the view shows a cache that has gone cold', () => {
    let now = 0;
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 1, accountQueueShare: 1, flexFillsAll: false }, BREAKER, undefined, () => now);
    state.recordUsage(1000, 900);
    now = 4 * 60_000;
    state.recordUsage(1000, 100);
    expect(state.snapshot().cachedTokenShare).toBe(0.5);
    now = 6 * 60_000;
    state.recordUsage(1000, 0);
    expect(state.snapshot().cachedTokenShare).toBe(0.05);
  });
});

describe('endpoint concurrency', () => {
  it('admits up to maxConcurrent, queues the next in order, and hands a released slot to the first waiter', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 2, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    const first = await state.tryAcquire('default');
    expect(first).toBeInstanceOf(Slot);
    expect(await state.tryAcquire('default')).toBeUndefined();
    const order: string[] = [];
    const a = state.acquireQueued('team', 'default', 1000, new Cancellation()).then((slot) => (order.push('a'), slot));
    const b = state.acquireQueued('team', 'default', 1000, new Cancellation()).then((slot) => (order.push('b'), slot));
    expect(state.load).toBe(3);
    expect(state.hasQueueRoom('team', 'default')).toBe(false);
    first!.release();
    (await a).release();
    await b;
    expect(order).toEqual(['a', 'b']);
    expect(state.inFlight).toBe(1);
  });

  it('gives a slot back once, however often it is released', async () => {
    const state = new EndpointState('e', { maxConcurrent: 2, maxQueue: 2, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    const first = await state.tryAcquire('default');
    await state.tryAcquire('default');
    first!.release();
    first!.release();
    expect(state.inFlight).toBe(1);
    expect(await state.tryAcquire('default')).toBeInstanceOf(Slot);
    expect(await state.tryAcquire('default')).toBeUndefined();
  });

  it('gives up waiting after the queue timeout', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 1, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    await state.tryAcquire('default');
    await expect(state.acquireQueued('team', 'default', 30, new Cancellation())).rejects.toBeInstanceOf(QueueTimeout);
    expect(state.queued).toBe(0);
  });

  it('leaves the queue at once when its request is cancelled, and a slot released later goes to the next', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 2, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    const held = await state.tryAcquire('default');
    const leaving = new Cancellation();
    const left = state.acquireQueued('team', 'default', 10_000, leaving);
    const staying = state.acquireQueued('team', 'default', 10_000, new Cancellation());
    leaving.cancel();
    await expect(left).rejects.toMatchObject({ name: 'AbortError' });
    expect(state.queued).toBe(1);
    held!.release();
    await staying;
    expect(state.inFlight).toBe(1);
  });

  it('refuses at once, taking no place in the queue, a request cancelled before it began to wait', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 2, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    const held = await state.tryAcquire('default');
    const gone = new Cancellation();
    gone.cancel();
    await expect(state.acquireQueued('team', 'default', 20, gone)).rejects.toMatchObject({ name: 'AbortError' });
    expect(state.queued).toBe(0);
    // Past the queue timeout nothing else fires: an error thrown from a timer would fail this test as uncaught.
    await new Promise((r) => setTimeout(r, 50));
    held!.release();
    expect(state.inFlight).toBe(0);
  });

  it("lets one account take only its share of the queue, leaving room for the others", async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 4, accountQueueShare: 0.5, flexFillsAll: false }, BREAKER);
    const held = await state.tryAcquire('default');
    const waits = [state.acquireQueued('burst', 'default', 1000, new Cancellation()), state.acquireQueued('burst', 'default', 1000, new Cancellation())];
    expect(state.hasQueueRoom('burst', 'default')).toBe(false);
    expect(state.hasQueueRoom('other', 'default')).toBe(true);
    held!.release();
    (await waits[0]).release();
    await waits[1];
  });

  it('hands freed slots to the accounts waiting in turn, not in arrival order', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 8, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    let held = (await state.tryAcquire('default'))!;
    const order: string[] = [];
    const waits = ['a1', 'a2', 'a3', 'b1', 'c1'].map((w) => state.acquireQueued(w[0], 'default', 1000, new Cancellation()).then((slot) => (order.push(w), (held = slot))));
    for (let i = 0; i < 5; i++) {
      held.release();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(waits);
    expect(order).toEqual(['a1', 'b1', 'c1', 'a2', 'a3']);
  });
});

describe('admission by service tier', () => {
  it('admits waiting requests priority first, then default, then flex once the room it leaves the others allows', async () => {
    let now = 0;
    const state = new EndpointState('e', { maxConcurrent: 2, maxQueue: 8, accountQueueShare: 1, flexFillsAll: false }, BREAKER, undefined, () => now);
    const held = [(await state.tryAcquire('default'))!, (await state.tryAcquire('default'))!];
    const order: string[] = [];
    const waits = (['flex', 'default', 'priority'] as const).map((tier) => state.acquireQueued(tier, tier, 60_000, new Cancellation()).then((slot) => (order.push(tier), held.push(slot))));
    expect(state.snapshot().queuedByTier).toEqual({ priority: 1, default: 1, flex: 1 });
    for (let i = 0; i < 4; i++) {
      held.shift()?.release();
      await new Promise((r) => setImmediate(r));
    }
    expect(order).toEqual(['priority', 'default']);
    // Two requests of other tiers were held at once within the last second: flex leaves room for them and one
    // more, until that window has passed.
    now += PEAK_WINDOW_MS / 2;
    await new Promise((r) => setTimeout(r, 3 * POLL_MS));
    expect(order).toEqual(['priority', 'default']);
    now += PEAK_WINDOW_MS;
    await Promise.all(waits);
    expect(order).toEqual(['priority', 'default', 'flex']);
  });

  it('lets flex fill every slot of an engine that schedules by priority, whatever the others held lately', () => {
    expect(flexLimit(8, true)).toBe(8);
    expect(mayAdmit('flex', 8, { flex: 7, other: 0 }, 5, true)).toBe(true);
    expect(mayAdmit('flex', 8, { flex: 8, other: 0 }, 0, true)).toBe(false);
  });

  it('lets flex fill all but its reserve with nothing else about, and leave room for the most others held lately, plus one', () => {
    expect(mayAdmit('flex', 8, { flex: 6, other: 0 }, 0)).toBe(true);
    expect(mayAdmit('flex', 8, { flex: 7, other: 0 }, 0)).toBe(false);
    expect(mayAdmit('flex', 8, { flex: 1, other: 3 }, 5)).toBe(true);
    expect(mayAdmit('flex', 8, { flex: 2, other: 3 }, 5)).toBe(false);
    expect(mayAdmit('default', 8, { flex: 7, other: 0 }, 0)).toBe(true);
    expect(mayAdmit('priority', 8, { flex: 7, other: 1 }, 0)).toBe(false);
  });

  it('never gives flex the last fifth of the slots (at least one), which a default request then finds free', async () => {
    expect([1, 2, 8, 10, 256].map((n) => flexLimit(n))).toEqual([1, 1, 7, 8, 205]);
    const state = new EndpointState('e', { maxConcurrent: 8, maxQueue: 8, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    for (let i = 0; i < 7; i++) expect(await state.tryAcquire('flex')).toBeInstanceOf(Slot);
    expect(await state.tryAcquire('flex')).toBeUndefined();
    expect(await state.tryAcquire('default')).toBeInstanceOf(Slot);
  });

  it('lets a default request pass waiting flex requests to a slot they may not take', async () => {
    const state = new EndpointState('e', { maxConcurrent: 8, maxQueue: 8, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    for (let i = 0; i < 7; i++) await state.tryAcquire('flex');
    const flex = state.acquireQueued('batch', 'flex', 30, new Cancellation());
    expect(await state.tryAcquire('default')).toBeInstanceOf(Slot);
    await expect(flex).rejects.toBeInstanceOf(QueueTimeout);
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

describe('queue room by tier', () => {
  it('counts flex waiters against flex only: a queue full of flex work still takes an interactive request', async () => {
    const state = new EndpointState('e', { maxConcurrent: 1, maxQueue: 2, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    const held = await state.tryAcquire('flex');
    const waits = [0, 1].map(() => state.acquireQueued('batch-team', 'flex', 1000, new Cancellation()));
    expect(state.hasQueueRoom('batch-team', 'flex')).toBe(false);
    expect(state.hasQueueRoom('other', 'flex')).toBe(false);
    expect(state.hasQueueRoom('batch-team', 'default')).toBe(true);
    expect(state.hasQueueRoom('other', 'priority')).toBe(true);
    held!.release();
    (await waits[0]).release();
    (await waits[1]).release();
  });
});
