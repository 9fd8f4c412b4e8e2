// The fleet's slot leases: while Redis's latest admission for an endpoint,
// at most a poll's time ago, found room to spare and no one waiting, a
// released lease passes to the replica's next request without a script
// call; once an admission took the last slot or found a request waiting, it
// does not; spares go back when that time is up, a turn's releases in one
// ZREM per set of leases.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { connectRedis, type Redis } from '../../src/redis/connection.js';
import { POLL_MS } from '../../src/routing/admission-rule.js';
import { FleetSlots } from '../../src/routing/fleet-slots.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

let server: TestRedis;
let redis: Redis;
beforeAll(async () => {
  server = await startTestRedis();
  redis = await connectRedis({ kind: 'server', url: server.url });
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

let slots: FleetSlots;
let endpoint: string;
beforeEach(() => {
  slots = new FleetSlots(redis);
  endpoint = `e${Math.random().toString(36).slice(2)}`;
});
afterEach(() => slots.close());

const calls = async (command: string) => Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(await server.client.info('commandstats'))?.[1] ?? 0);
const leasesHeld = async () => {
  let held = 0;
  for (const key of await server.client.keys(`*slots:${endpoint}}*leases*`)) held += await server.client.zcard(key);
  return held;
};
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('fleet slot leases', () => {
  it("passes a released lease to the replica's next request of its kind without asking Redis", async () => {
    const lease = await slots.acquire(endpoint, 'default', { maxConcurrent: 8, flexFillsAll: false });
    expect(lease).toBeTypeOf('string');
    slots.release(endpoint, lease!);
    const scripts = await calls('evalsha');
    expect(await slots.acquire(endpoint, 'priority', { maxConcurrent: 8, flexFillsAll: false })).toBe(lease);
    expect(await calls('evalsha')).toBe(scripts);
    expect(await leasesHeld()).toBe(1);
    // A flex request is not given another kind's lease.
    const flex = await slots.acquire(endpoint, 'flex', { maxConcurrent: 8, flexFillsAll: false });
    expect(flex).not.toBe(lease);
    expect(await calls('evalsha')).toBe(scripts + 1);
  });

  it('passes a lease on while the latest admission is fresh, however long ago that lease itself was granted', async () => {
    const limits = { maxConcurrent: 8, flexFillsAll: false };
    const first = await slots.acquire(endpoint, 'default', limits);
    // A poll's time after its grant: a lease passed on only for that long after its own grant would go back.
    await pause(POLL_MS);
    // Another request's admission, with room to spare, is Redis's fresh word on the endpoint.
    const second = await slots.acquire(endpoint, 'default', limits);
    await pause(POLL_MS / 4);
    slots.release(endpoint, first!);
    const scripts = await calls('evalsha');
    expect(await slots.acquire(endpoint, 'default', limits)).toBe(first);
    expect(await calls('evalsha')).toBe(scripts);
    expect(await leasesHeld()).toBe(2);
    slots.release(endpoint, second!);
  });

  it('stops passing leases on once an admission takes the last slot', async () => {
    const limits = { maxConcurrent: 2, flexFillsAll: false };
    // One of two taken: room to spare. Then the last: the fleet is full.
    const first = await slots.acquire(endpoint, 'default', limits);
    const last = await slots.acquire(endpoint, 'default', limits);
    expect(last).toBeTypeOf('string');
    slots.release(endpoint, first!);
    await pause(5);
    expect(await leasesHeld()).toBe(1);
    expect(await slots.acquire(endpoint, 'default', limits)).not.toBe(first);
  });

  it('gives spares back once a poll has passed, a turn of them in one ZREM per set of leases', async () => {
    const leases = await Promise.all([slots.acquire(endpoint, 'default', { maxConcurrent: 8, flexFillsAll: false }), slots.acquire(endpoint, 'default', { maxConcurrent: 8, flexFillsAll: false }), slots.acquire(endpoint, 'flex', { maxConcurrent: 8, flexFillsAll: false })]);
    expect(leases.every((l) => typeof l === 'string')).toBe(true);
    const before = await calls('zrem');
    for (const lease of leases) slots.release(endpoint, lease!);
    expect(await leasesHeld()).toBe(3);
    await pause(POLL_MS * 3);
    // Two sets (flex leases, the others): two calls for three leases.
    expect((await calls('zrem')) - before).toBe(2);
    expect(await leasesHeld()).toBe(0);
    const next = await slots.acquire(endpoint, 'default', { maxConcurrent: 8, flexFillsAll: false });
    expect(leases).not.toContain(next);
  });

  it('gives back at once a lease that took the last slot', async () => {
    const lease = await slots.acquire(endpoint, 'default', { maxConcurrent: 1, flexFillsAll: false });
    slots.release(endpoint, lease!);
    await pause(5);
    expect(await leasesHeld()).toBe(0);
    const next = await slots.acquire(endpoint, 'default', { maxConcurrent: 1, flexFillsAll: false });
    expect(next).toBeTypeOf('string');
    expect(next).not.toBe(lease);
  });

  it('does not pass on a lease granted while a request waits on another replica', async () => {
    const filler = new FleetSlots(redis);
    const waiter = new FleetSlots(redis);
    try {
      const leases = await Promise.all([1, 2, 3, 4].map(() => filler.acquire(endpoint, 'default', { maxConcurrent: 4, flexFillsAll: false })));
      // The fleet is full: the waiting replica's request is refused and marked waiting.
      expect(await waiter.acquire(endpoint, 'default', { maxConcurrent: 4, flexFillsAll: false })).toBeUndefined();
      filler.release(endpoint, leases[0]!);
      filler.release(endpoint, leases[1]!);
      await filler.close();
      expect(await leasesHeld()).toBe(2);
      // Room is left after this grant, but a request waits: the lease goes back as it is released.
      const granted = await slots.acquire(endpoint, 'default', { maxConcurrent: 4, flexFillsAll: false });
      expect(granted).toBeTypeOf('string');
      slots.release(endpoint, granted!);
      await pause(5);
      expect(await leasesHeld()).toBe(2);
      expect(await slots.acquire(endpoint, 'default', { maxConcurrent: 4, flexFillsAll: false })).not.toBe(granted);
    } finally {
      await waiter.close();
    }
  });

  it('gives back, once Redis is there again, a lease released while it was away: within a renewal, not when the lease lapses', async () => {
    const lease = await slots.acquire(endpoint, 'default', { maxConcurrent: 1, flexFillsAll: false });
    expect(await leasesHeld()).toBe(1);
    await server.kill();
    slots.release(endpoint, lease!);
    await pause(50);
    await server.restart();
    const back = Date.now();
    await expect.poll(leasesHeld, { timeout: 10_000, interval: 200 }).toBe(0);
    expect(Date.now() - back).toBeLessThan(7_000);
  });

  it('keeps flex, fleet-wide, to the room the most other-tier leases held lately leave, plus one', async () => {
    const limits = { maxConcurrent: 8, flexFillsAll: false };
    const others = await Promise.all([1, 2, 3, 4, 5].map(() => slots.acquire(endpoint, 'default', limits)));
    for (const lease of others.slice(1)) slots.release(endpoint, lease!);
    await expect.poll(leasesHeld, { interval: POLL_MS }).toBe(1);
    // Five were held at once a moment ago, one is now: flex may take 8 - (5 + 1) = 2 slots, not the 6 its reserve alone leaves.
    const flex = [];
    for (let i = 0; i < 4; i++) flex.push(await slots.acquire(endpoint, 'flex', limits));
    expect(flex.filter(Boolean)).toHaveLength(2);
  });

  it('gives its spares back when it closes', async () => {
    const lease = await slots.acquire(endpoint, 'default', { maxConcurrent: 8, flexFillsAll: false });
    slots.release(endpoint, lease!);
    await slots.close();
    expect(await leasesHeld()).toBe(0);
  });
});
