// An upload or a batch is written in parts (a MiB, or a chunk of lines, at a
// time) and made visible by one transaction. Where Redis refuses a part (as a
// full one refuses writes) or discards the transaction, the upload or batch
// fails, nothing of it stays behind, and its bytes are no longer counted;
// before, a refused part went unnoticed and a file or batch was stored with
// parts missing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { createBatch, activeMember, type NewBatch } from '../../src/batches/batch-store.js';
import { createFile, readFile } from '../../src/batches/file-store.js';
import { storedLines } from '../../src/batches/stored-lines.js';
import { redisKeys } from '../../src/redis/keys.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startTestRedis();
});
afterAll(() => redis.stop());

const keep = { ms: 60_000, capBytes: 64 * 2 ** 20 };
const MIB = 2 ** 20;
const counted = (account: string) => redis.client.hgetall(redisKeys.storedBytes(account).sizes);

/**
 * The client, but every transaction it begins after the first `spared` has a command Redis refuses as it is
 * queued: Redis discards it whole.
 */
function discardingTransactions(client: Redis, spared = 0): Redis {
  let begun = 0;
  return new Proxy(client, {
    get(target, name) {
      if (name === 'multi') return () => (++begun > spared ? target.multi().call('NO-SUCH-COMMAND') : target.multi());
      const value = Reflect.get(target, name, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('an upload written in parts', () => {
  it('fails where Redis refuses a part, and leaves nothing of it, counted or stored', async () => {
    const account = 'acct_refused_part';
    const file = { id: 'file-a', filename: 'in.jsonl', purpose: 'batch', content: [Buffer.alloc(3 * MIB, 'a')] };
    // A key of another type where the content goes: Redis refuses its APPEND, as a full one refuses a write.
    const { content } = redisKeys.file(account, file.id);
    await redis.client.hset(content, 'x', '1');
    await expect(createFile(redis.client, account, file, keep)).rejects.toThrow('WRONGTYPE');
    expect(await readFile(redis.client, account, file.id)).toBeNull();
    expect(await redis.client.exists(content)).toBe(0);
    expect(await counted(account)).toEqual({});
  });

  it('drops what it wrote where Redis discards the transaction that would list it', async () => {
    const account = 'acct_discarded_upload';
    const file = { id: 'file-b', filename: 'in.jsonl', purpose: 'batch', content: [Buffer.alloc(2 * MIB, 'b')] };
    await expect(createFile(discardingTransactions(redis.client), account, file, keep)).rejects.toThrow('EXECABORT');
    expect(await redis.client.exists(redisKeys.file(account, file.id).content)).toBe(0);
    expect(await counted(account)).toEqual({});
  });
});

describe('a batch written in parts', () => {
  const LINES = Array.from({ length: 3_000 }, (_, i) => JSON.stringify([`line-${i}`, { model: 'm', messages: [{ role: 'user', content: `question ${i}` }] }]));
  const batch = (account: string, id: string): NewBatch => ({
    id, api: 'openai', account, keyId: 'key_1', endpoint: '/v1/chat/completions', inputFileId: null, metadata: null, model: 'm', windowMs: 86_400_000,
    stored: { lines: storedLines(LINES), order: Array.from({ length: 3_000 }, (_, i) => i) },
  });

  it('fails where Redis refuses a chunk of its lines, and leaves nothing of it: no lines, no place in the queue, nothing counted', async () => {
    const b = batch('acct_refused_lines', 'batch_a');
    const keys = redisKeys.batch(b.account, b.id);
    // The queue of lines to run is a key of another type: Redis refuses its first RPUSH, after every line is in.
    await redis.client.set(keys.todo, 'x');
    await expect(createBatch(redis.client, b, keep)).rejects.toThrow('WRONGTYPE');
    expect(await redis.client.exists(keys.lines, keys.todo, keys.meta)).toBe(0);
    expect(await redis.client.zscore(redisKeys.activeBatches, activeMember(b.account, b.id))).toBeNull();
    expect(await redis.client.zcard(redisKeys.accountActiveBatches(b.account))).toBe(0);
    expect(await counted(b.account)).toEqual({});
  });

  it('drops its lines where Redis discards the transaction that would make it visible', async () => {
    const b = batch('acct_discarded_batch', 'batch_b');
    const keys = redisKeys.batch(b.account, b.id);
    // The first transaction counts it among the account's batches running; the second, which would list it, is discarded.
    await expect(createBatch(discardingTransactions(redis.client, 1), b, keep)).rejects.toThrow('EXECABORT');
    expect(await redis.client.exists(keys.lines, keys.todo, keys.meta)).toBe(0);
    expect(await redis.client.zscore(redisKeys.activeBatches, activeMember(b.account, b.id))).toBeNull();
    expect(await redis.client.zcard(redisKeys.accountActiveBatches(b.account))).toBe(0);
  });
});
