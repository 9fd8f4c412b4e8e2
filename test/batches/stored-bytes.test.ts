// An account's stored bytes count each item until Redis drops its data, and
// no longer: an item past its end gives its bytes back, one deleted at once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keepStoredFor, releaseStoredBytes, reserveStoredBytes } from '../../src/batches/stored-bytes.js';
import { redisKeys } from '../../src/redis/keys.js';
import { sleep } from '../support/fake-upstream.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

const refused = { status: 400, code: 'storage_limit_reached' };

describe("an account's stored bytes", () => {
  it('refuses what would pass the cap, and counts an item until its end, moved or not, or until it is released', async () => {
    const { client } = redis;
    const account = 'acct_counted';
    const keys = redisKeys.storedBytes(account);
    await reserveStoredBytes(client, account, 'file:a', 60, 100, 300, 'file');
    await expect(reserveStoredBytes(client, account, 'file:b', 41, 100, 60_000, 'file')).rejects.toMatchObject({ ...refused, param: 'file', message: expect.stringContaining('keeps 60 bytes') });
    await reserveStoredBytes(client, account, 'batch:c', 40, 100, 300, null);
    await keepStoredFor(client, account, 'batch:c', 60_000);
    // Both keys last as long as the last item.
    expect(await client.pttl(keys.items)).toBeGreaterThan(59_000);
    expect(await client.pttl(keys.sizes)).toBeGreaterThan(59_000);
    await sleep(400);
    // a's end has passed: its 60 bytes are back; c's was moved on, so its 40 are still counted.
    await reserveStoredBytes(client, account, 'file:b', 60, 100, 60_000, 'file');
    await expect(reserveStoredBytes(client, account, 'file:d', 1, 100, 60_000, 'file')).rejects.toMatchObject(refused);
    await releaseStoredBytes(client, account, 'batch:c');
    await releaseStoredBytes(client, account, 'batch:c');
    await reserveStoredBytes(client, account, 'file:d', 40, 100, 60_000, 'file');
    expect(await client.hget(keys.sizes, '#total')).toBe('100');
    // With nothing counted, nothing is left behind.
    await releaseStoredBytes(client, account, 'file:b');
    await releaseStoredBytes(client, account, 'file:d');
    expect(await client.exists(keys.items, keys.sizes)).toBe(0);
  });

  it("keeps each account's count its own", async () => {
    const { client } = redis;
    await reserveStoredBytes(client, 'acct_one', 'file:a', 100, 100, 60_000, 'file');
    await reserveStoredBytes(client, 'acct_two', 'file:a', 100, 100, 60_000, 'file');
    await expect(reserveStoredBytes(client, 'acct_one', 'file:b', 1, 100, 60_000, 'file')).rejects.toMatchObject(refused);
  });
});
