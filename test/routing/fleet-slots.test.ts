// The fleet's slot releases of one turn go to Redis together: one ZREM per
// set of leases, not one per lease.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedis, type Redis } from '../../src/redis/connection.js';
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

const zremCalls = async () => Number(/cmdstat_zrem:calls=(\d+)/.exec(await server.client.info('commandstats'))?.[1] ?? 0);

describe('slot releases', () => {
  it("gives a turn's slot releases back in one ZREM per set of leases", async () => {
    const slots = new FleetSlots(redis);
    try {
      const leases = await Promise.all([slots.acquire('e1', 'default', 8), slots.acquire('e1', 'default', 8), slots.acquire('e1', 'flex', 8)]);
      expect(leases.every((l) => typeof l === 'string')).toBe(true);
      const before = await zremCalls();
      for (const lease of leases) slots.release('e1', lease!);
      await new Promise((resolve) => setTimeout(resolve, 50));
      // Two sets (flex leases, the others): two calls for three leases.
      expect((await zremCalls()) - before).toBe(2);
      const keys = await server.client.keys('*slots:e1*leases*');
      for (const key of keys) expect(await server.client.zcard(key)).toBe(0);
    } finally {
      slots.close();
    }
  });
});
