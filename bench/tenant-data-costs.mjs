// What one team's stored data costs the replica that serves it, and Redis:
// each read below runs in this process against a private redis-server, the
// way a replica runs it, and is measured by its wall time, this process's
// CPU, the event loop's longest stall while it ran (what every other
// request on the replica waits) and how far the process's memory grew:
// - a list of files, with 20,000 batch outputs and 2 uploads kept: all of
//   them (10,000 asked for), the uploads alone, a purpose none has;
// - Anthropic's list of batches, 1,000 asked for, of 1,000 kept, and a
//   reading of all 1,000 (the admin API's, /metrics');
// - a batch's input of 1,000 lines of 32 KB read and stored;
// - an Anthropic create body of 32 MiB of small requests: parsed on this
//   thread, and read on the intake thread; one of 32 MiB of 50,000
//   requests, read; one of 32 MiB of numbers; and one of 32 MiB of `{},`
//   (11 million objects, the most a body of that size makes);
// - the fleet's active set of 100,000 batches read whole and a page of 1,000
//   at a time, in Redis's own time (INFO commandstats).
//
//   npm run build && node bench/tenant-data-costs.mjs [rounds, 3]
import { spawn } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort, median, track, stopAll } from './support.mjs';

const ROUNDS = Number(process.argv[2] ?? 3);
const dist = (path) => import(new URL(`../dist/${path}`, import.meta.url).href);
const { listFiles } = await dist('batches/file-store.js');
const { createBatch, listBatches, readBatches } = await dist('batches/batch-store.js');
const { IntakeThread } = await dist('batches/intake-thread.js');
// The replica's intake, without its limit on an account's time a minute: the bench measures the reading.
const batchIntake = new IntakeThread(undefined, Infinity);
const { redisKeys } = await dist('redis/keys.js');

const port = freePort();
track(spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' }));
await sleep(300);
const redis = new Redis({ port });

/** Runs `work` ROUNDS times: the medians of its ms, its CPU ms and the loop's longest stall in ms, and the process's most growth in MB. */
async function measured(label, work) {
  const rows = [];
  for (let round = 0; round < ROUNDS; round++) {
    const loop = monitorEventLoopDelay({ resolution: 2 });
    loop.enable();
    await sleep(10);
    const rss = process.memoryUsage.rss();
    let peak = rss;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 5);
    const cpu = process.cpuUsage();
    const started = performance.now();
    const out = await work(round);
    const ms = performance.now() - started;
    const { user, system } = process.cpuUsage(cpu);
    clearInterval(sampler);
    await sleep(10);
    loop.disable();
    rows.push({ ms, cpuMs: (user + system) / 1000, stallMs: loop.max / 1e6, grownMb: (peak - rss) / 1e6, out });
  }
  const m = (key) => median(rows.map((r) => r[key])).toFixed(0);
  // The most the process grew in any round: memory a round freed is kept for the next, which then grows less.
  const grown = Math.max(...rows.map((r) => r.grownMb)).toFixed(0);
  console.log(`| ${label} | ${m('ms')} | ${m('cpuMs')} | ${m('stallMs')} | ${grown} | ${rows[0].out ?? ''} |`);
}

const now = Date.now();
const account = 'acct_bench';
const seed = redis.pipeline();
for (let i = 0; i < 20_000; i++) {
  const id = `file-out${i}`;
  seed.hset(redisKeys.file(account, id).meta, { filename: 'out.jsonl', purpose: 'batch_output', batch: `batch_${i}`, part: 'output', bytes: 100, created_at: now - 30_000 + i, expires_at: now + 3_600_000 });
  seed.zadd(redisKeys.accountFiles(account), now - 30_000 + i, id);
  seed.zadd(redisKeys.accountFilesOf(account, 'batch_output'), now - 30_000 + i, id);
}
for (let i = 0; i < 2; i++) {
  const id = `file-in${i}`;
  seed.hset(redisKeys.file(account, id).meta, { filename: 'in.jsonl', purpose: 'batch', bytes: 100, created_at: now + i, expires_at: now + 3_600_000 });
  seed.zadd(redisKeys.accountFiles(account), now + i, id);
  seed.zadd(redisKeys.accountFilesOf(account, 'batch'), now + i, id);
}
for (let i = 0; i < 1_000; i++) {
  const k = redisKeys.batch(account, `msgbatch_${i}`);
  seed.hset(k.meta, { api: 'anthropic', account, key: 'key_1', endpoint: '/v1/messages', input_file_id: '', metadata: '', model: 'm', status: 'completed', created_at: now, expires_at: now + 1e8, completed_at: now });
  seed.hset(k.results, { '#total': 10, '#succeeded': 10, '#errored': 0, '#cost': 100, '#prompt_tokens': 10, '#cached_tokens': 0, '#completion_tokens': 10 });
  seed.zadd(redisKeys.accountBatches(account, 'anthropic'), i, `msgbatch_${i}`);
}
await seed.exec();
await redis.set(redisKeys.accountFilesByPurposeBuilt(account), '1');

console.log('| read | ms | CPU ms | longest stall ms | memory grown MB | answered |');
console.log('| --- | --- | --- | --- | --- | --- |');
await measured('files, 10,000 asked for, of 20,002', async () => `${(await listFiles(redis, account, { limit: 10_000, order: 'desc' })).files.length} files`);
await measured('files of purpose `batch` (2 of 20,002)', async () => `${(await listFiles(redis, account, { limit: 10_000, order: 'desc', purpose: 'batch' })).files.length} files`);
await measured('files of a purpose none has', async () => `${(await listFiles(redis, account, { limit: 10_000, order: 'desc', purpose: 'fine-tune' })).files.length} files`);
await measured('batches, 1,000 asked for, of 1,000', async () => `${(await listBatches(redis, account, 'anthropic', { limit: 1_000 })).batches.length} batches`);
await measured('all 1,000 batches read (admin API, /metrics)', async () => `${(await readBatches(redis, Array.from({ length: 1_000 }, (_, i) => [account, `msgbatch_${i}`]))).length} batches`);

const line = (i) => JSON.stringify({ custom_id: `r${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: `${i} `.padEnd(32_000, 'x') }] } });
const file = Buffer.from(Array.from({ length: 1_000 }, (_, i) => line(i)).join('\n'));
await measured('1,000 lines of 32 KB read on the intake thread and stored', async (round) => {
  const read = await batchIntake.read(account, { kind: 'openai', endpoint: '/v1/chat/completions', content: Buffer.from(file) });
  await createBatch(redis, { id: `batch_large${round}`, api: 'openai', account, keyId: 'key_1', endpoint: '/v1/chat/completions', inputFileId: null, metadata: null, model: 'm', windowMs: 86_400_000, stored: read }, { ms: 60_000, capBytes: 2 ** 30 });
  return `${read.texts.length} lines`;
});

const body = Buffer.from(JSON.stringify({ requests: Array.from({ length: 690_000 }, (_, i) => ({ custom_id: `r${i}`, params: { model: 'm' } })) }));
await measured(`an Anthropic create of ${(body.length / 2 ** 20).toFixed(1)} MiB, parsed on this thread`, async () => `${JSON.parse(body.toString('utf8')).requests.length} requests`);
const refused = (err) => `${err.status}: too many requests`;
await measured(`the same, read on the intake thread`, async () => batchIntake.read(account, { kind: 'anthropic', content: Buffer.from(body), maxLines: 50_000 }).then(() => 'read', refused));
const most = Buffer.from(JSON.stringify({ requests: Array.from({ length: 50_000 }, (_, i) => ({ custom_id: `r${i}`, params: { model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'x'.repeat(560) }] } })) }));
await measured(`an Anthropic create of ${(most.length / 2 ** 20).toFixed(1)} MiB, 50,000 requests, read on the intake thread`, async () => `${(await batchIntake.read(account, { kind: 'anthropic', content: Buffer.from(most), maxLines: 50_000 })).texts.length} requests`);
const objects = Buffer.from(`{"requests":[${Array(11_184_810).fill('{}').join(',')}]}`);
const refusedWith = (err) => `${err.status}: ${err.code}`;
const numbers = Buffer.from(`{"requests":[${Array(16_777_215).fill('0').join(',')}]}`);
await measured('a create of 32 MiB of numbers, read on the intake thread', async () => batchIntake.read(account, { kind: 'anthropic', content: Buffer.from(numbers), maxLines: 50_000 }).then(() => 'read', refusedWith));
await measured(`a create of 32 MiB of \`{},\`, read on the intake thread`, async () => batchIntake.read(account, { kind: 'anthropic', content: Buffer.from(objects), maxLines: 50_000 }).then(() => 'read', refusedWith));

const active = redisKeys.activeBatches;
for (let i = 0; i < 100_000; i += 5_000) await redis.zadd(active, ...Array.from({ length: 5_000 }, (_, j) => [now + i + j, `acct_${(i + j) % 1_000} batch_${i + j}`]).flat());
const zrangeUs = async () => Number(/^cmdstat_zrange:calls=\d+,usec=(\d+)/m.exec(await redis.info('commandstats'))?.[1] ?? 0);
for (const [label, stop] of [['whole', -1], ['a page of 1,000', 999]]) {
  const us = [];
  for (let round = 0; round < ROUNDS; round++) {
    const before = await zrangeUs();
    await redis.zrange(active, 0, stop, 'WITHSCORES');
    us.push((await zrangeUs()) - before);
  }
  console.log(`The fleet's active set of 100,000, read ${label}: ${(median(us) / 1000).toFixed(2)} ms of Redis`);
}

redis.disconnect();
stopAll();
process.exit(0);
