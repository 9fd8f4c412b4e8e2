// Batches in Redis, shared by the fleet: every replica runs lines of every
// batch, and any replica answers for any batch. Each batch's keys are in its
// account's slot (redis/keys.ts), so every change to one is one script on one
// primary, and a line's charge and its result land in one settlement
// (billing/credit-ledger.ts). A line is claimed with a lease its replica
// renews; a replica that dies stops renewing, and the next claim puts its
// lines back to run again (each at most MAX_TRIES times). A line's result is
// written once: the charge's script refuses a second, and a failure is
// written only where there is none.
import type { Redis } from 'ioredis';
import { ApiError } from '../protocol/errors.js';
import { redisKeys } from '../redis/keys.js';
import { LUA_INT, LUA_NOW_MS, luaScript } from '../redis/lua-script.js';
import { execAll, writeInParts } from '../redis/pipelines.js';
import { LUA_KEEP_STORED_FOR, releaseStoredBytes, storeCounted } from './stored-bytes.js';
import { lineBytes, type StoredLines } from './stored-lines.js';

export type BatchApi = 'openai' | 'anthropic';
export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

/** Tries a line gets: a replica lost with it in flight costs one. */
export const MAX_TRIES = 3;

/** A problem with a batch's input, found before it runs (OpenAI's `errors.data`). */
export interface InputProblem {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

export interface BatchRecord {
  id: string;
  api: BatchApi;
  account: string;
  keyId: string;
  endpoint: string;
  inputFileId: string | null;
  metadata: Record<string, string> | null;
  status: BatchStatus;
  /** Times in ms; null where the batch has not been there. */
  times: Record<'created' | 'inProgress' | 'expires' | 'finalizing' | 'completed' | 'failed' | 'expired' | 'cancelling' | 'cancelled', number | null>;
  problems: InputProblem[] | null;
  outputFileId: string | null;
  errorFileId: string | null;
  /** The model the first line names: what the platform shows. */
  model: string;
  counts: { total: number; succeeded: number; errored: number; queued: number; running: number };
  /** Micro-units charged so far. */
  cost: number;
  usage: { promptTokens: number; cachedTokens: number; completionTokens: number };
}

/** Whether a batch has run all it will: its results can be read, and it may be deleted. */
export const hasEnded = (status: BatchStatus) => status === 'completed' || status === 'expired' || status === 'cancelled';

/** A line as stored: the client's id for it and the body to send. */
export interface StoredLine {
  customId: string;
  body: Record<string, unknown>;
}

const COUNTERS = ['#total', '#succeeded', '#errored', '#cost', '#prompt_tokens', '#cached_tokens', '#completion_tokens'] as const;
const TIME_FIELDS = { created: 'created_at', inProgress: 'in_progress_at', expires: 'expires_at', finalizing: 'finalizing_at', completed: 'completed_at', failed: 'failed_at', expired: 'expired_at', cancelling: 'cancelling_at', cancelled: 'cancelled_at' } as const;
/** Lines written in one command, at most: a thousand, or as many as fill a MiB (a chunk of 32 KB lines held Redis for its 32 MB). */
const WRITE_CHUNK = 1000;
const WRITE_CHUNK_BYTES = 2 ** 20;

/** How long files and ended batches are kept, in whole ms (Redis takes no other). */
export const keepMsOf = (settings: { keepDays: number }) => Math.round(settings.keepDays * 86_400_000);

/** The member of the fleet's active set for a batch. */
export const activeMember = (account: string, id: string) => `${account} ${id}`;

/**
 * The most batches an account may have running at once: the fleet's runners give each account its turn, and
 * visit each of its batches in turn.
 */
export const MAX_ACTIVE_BATCHES = 100;

/** How long past its window a batch may still be in the fleet's active set: finalizing, and a runner's turn to retire it. */
const FINALIZING_MS = 10 * 60_000;

/**
 * Counts a new batch among its account's active ones, in the account's own slot: with its own entry in, so that
 * batches made at once cannot pass the most together (each sees the others); past the most, it is taken out
 * again. Each entry lapses when its batch may run no longer (its window, and a finalizing's time), so that one a
 * replica left behind, dying part-way through a create, stops counting then. Returns how many the account had.
 */
async function countActive(redis: Redis, account: string, id: string, windowMs: number): Promise<number> {
  const key = redisKeys.accountActiveBatches(account);
  const now = Date.now();
  const [, , [, counted]] = (await redis.multi().zremrangebyscore(key, '-inf', now).zadd(key, now + windowMs + FINALIZING_MS, id).zcard(key).exec())!;
  const active = counted as number;
  if (active > MAX_ACTIVE_BATCHES) await redis.zrem(key, id);
  return active;
}

/** Takes a batch out of the fleet's active set and its account's count. */
export async function retireActive(redis: Redis, account: string, id: string): Promise<void> {
  await Promise.all([redis.zrem(redisKeys.activeBatches, activeMember(account, id)), redis.zrem(redisKeys.accountActiveBatches(account), id)]);
}

const allKeys = (account: string, id: string) => Object.values(redisKeys.batch(account, id));

export interface NewBatch extends Pick<BatchRecord, 'id' | 'api' | 'account' | 'keyId' | 'endpoint' | 'inputFileId' | 'metadata' | 'model'> {
  windowMs: number;
  /** Lines as stored, and the order to run them in (indices into `lines`). */
  stored: { lines: StoredLines; order: number[] };
}

/** A new batch's hash: what it is, whose, and when it started and must end. */
const metaFields = (b: Omit<NewBatch, 'stored'>, status: BatchStatus, now: number) => ({
  api: b.api, account: b.account, key: b.keyId, endpoint: b.endpoint, input_file_id: b.inputFileId ?? '', metadata: b.metadata ? JSON.stringify(b.metadata) : '',
  model: b.model, status, created_at: now, expires_at: now + b.windowMs,
});

/**
 * Stores a batch and puts it in the fleet's queue. Its lines' bytes are counted against the account's cap first
 * (refused past it: stored-bytes.ts), for as long as they are kept. It is counted among its account's batches
 * running next (a 429 past MAX_ACTIVE_BATCHES: countActive), then given its entry in the fleet's queue. That is in
 * another slot, so it cannot join the transaction below; a runner leaves an entry whose batch is not there yet for
 * a minute, and so one whose replica died part-way through storing it goes then. Lines go next, in chunks (a file
 * of 50,000 lines would otherwise hold Redis in one command); the batch's hash, which makes it visible, goes last,
 * in one transaction with its counters and its place in the account's list. Lines a replica lost part-way expire;
 * where a write fails, what was written goes at once, and the batch's place in the queue and the count with it.
 */
export async function createBatch(redis: Redis, b: NewBatch, keep: { ms: number; capBytes: number }): Promise<void> {
  const keys = redisKeys.batch(b.account, b.id);
  const linesMs = keep.ms + b.windowMs;
  const { lines, order } = b.stored;
  const count = lines.ends.length;
  await storeCounted(redis, b.account, `batch:${b.id}`, { bytes: lines.bytes.length, capBytes: keep.capBytes, keepMs: linesMs, param: null }, async () => {
    const active = await countActive(redis, b.account, b.id, b.windowMs);
    if (active > MAX_ACTIVE_BATCHES) {
      throw new ApiError(429, 'rate_limit_error', `This account has ${active - 1} batches running, the most it may have at once; wait for one to end, or cancel one.`, 'too_many_batches');
    }
    const now = Date.now();
    await writeInParts(
      async () => {
        await redis.zadd(redisKeys.activeBatches, now, activeMember(b.account, b.id));
        for (let i = 0; i < count; ) {
          const fields: (string | Buffer)[] = [];
          for (let size = 0; i < count && fields.length < 2 * WRITE_CHUNK && size < WRITE_CHUNK_BYTES; i++) {
            const line = lineBytes(lines, i);
            fields.push(String(i), line);
            size += line.length;
          }
          await execAll(redis.pipeline().hset(keys.lines, ...fields).pexpire(keys.lines, linesMs));
        }
        for (let i = 0; i < order.length; i += WRITE_CHUNK) {
          await execAll(redis.pipeline().rpush(keys.todo, ...order.slice(i, i + WRITE_CHUNK).map(String)).pexpire(keys.todo, linesMs));
        }
      },
      () =>
        redis
          .multi()
          .hset(keys.meta, { ...metaFields(b, 'in_progress', now), in_progress_at: now })
          .hset(keys.results, '#total', count)
          .zadd(redisKeys.accountBatches(b.account, b.api), now, b.id)
          .exec(),
      () => Promise.all([redis.del(keys.lines, keys.todo), retireActive(redis, b.account, b.id)]),
    );
  });
}

/** Stores a batch whose input was refused: `failed` at once, with its problems, and nothing to run. */
export async function createFailedBatch(redis: Redis, b: Omit<NewBatch, 'stored'>, problems: InputProblem[], keepMs: number): Promise<void> {
  const keys = redisKeys.batch(b.account, b.id);
  const now = Date.now();
  await redis
    .multi()
    .hset(keys.meta, { ...metaFields(b, 'failed', now), failed_at: now, errors: JSON.stringify(problems) })
    .hset(keys.results, '#total', 0)
    .pexpire(keys.meta, keepMs)
    .pexpire(keys.results, keepMs)
    .zadd(redisKeys.accountBatches(b.account, b.api), now, b.id)
    .exec();
}

const timeOf = (v: string | undefined) => (v ? Number(v) : null);

/**
 * The most batches one list answers (Anthropic's API may ask for 1,000; past these the list says it has more, as any
 * page does): a thousand read at once took 130 to 270 ms of the replica's main thread, 60 to 130 of it in one go (a
 * one-off script, 2026-11-29), and an account's rate window lets it ask 16 times a second.
 */
export const BATCHES_PER_LIST = 100;

/** Batches read at once: their answers come back together, and are taken in one turn of the event loop. */
const READ_AT_ONCE = 50;

/** Each batch, or null where it is gone, read a few at a time so that other requests are served between. */
export async function readBatches(redis: Redis, refs: [account: string, id: string][]): Promise<(BatchRecord | null)[]> {
  const read: (BatchRecord | null)[] = [];
  for (let i = 0; i < refs.length; i += READ_AT_ONCE) read.push(...(await Promise.all(refs.slice(i, i + READ_AT_ONCE).map(([account, id]) => readBatch(redis, account, id)))));
  return read;
}

/**
 * The batch, if the account has one by that id. Read in one transaction (its keys share the account's slot): read
 * one after another, a line claimed between the queue's length and the in-flight count was counted in both, and
 * the lines by state summed to 61 of 60 in a test run.
 */
export async function readBatch(redis: Redis, account: string, id: string): Promise<BatchRecord | null> {
  const keys = redisKeys.batch(account, id);
  const [[, meta], [, counters], [, queued], [, running]] = (await redis
    .multi()
    .hgetall(keys.meta)
    .hmget(keys.results, ...COUNTERS)
    .llen(keys.todo)
    .zcard(keys.inFlight)
    .exec()) as [unknown, unknown][];
  const m = meta as Record<string, string>;
  if (!m.status) return null;
  const [total, succeeded, errored, cost, promptTokens, cachedTokens, completionTokens] = (counters as (string | null)[]).map((c) => Number(c ?? 0));
  // A line's success is written by its settlement, and its lease dropped a moment later (endLine): between the two
  // it is in both counts. A line done is not running, so the running are at most what is neither queued nor done.
  const notRunning = (queued as number) + succeeded + errored;
  const times = Object.fromEntries(Object.entries(TIME_FIELDS).map(([name, field]) => [name, timeOf(m[field])])) as BatchRecord['times'];
  return {
    id, api: m.api as BatchApi, account, keyId: m.key, endpoint: m.endpoint, inputFileId: m.input_file_id || null,
    metadata: m.metadata ? JSON.parse(m.metadata) : null, status: m.status as BatchStatus, times,
    problems: m.errors ? JSON.parse(m.errors) : null, outputFileId: m.output_file_id || null, errorFileId: m.error_file_id || null, model: m.model,
    counts: { total, succeeded, errored, queued: queued as number, running: Math.max(0, Math.min(running as number, total - notRunning)) },
    cost, usage: { promptTokens, cachedTokens, completionTokens },
  };
}

/** An account's batches of one API, newest first: `after` (older than) or `before` (newer than) an id. */
export async function listBatches(redis: Redis, account: string, api: BatchApi, asked: { limit: number; after?: string; before?: string }): Promise<{ batches: BatchRecord[]; hasMore: boolean }> {
  const page = { ...asked, limit: Math.min(asked.limit, BATCHES_PER_LIST) };
  const index = redisKeys.accountBatches(account, api);
  let ids: string[];
  if (page.before) {
    const rank = await redis.zrevrank(index, page.before);
    const end = (rank ?? 0) - 1;
    ids = end < 0 ? [] : await redis.zrevrange(index, Math.max(0, end - page.limit), end);
    const hasMore = end - page.limit >= 0;
    ids = hasMore ? ids.slice(1) : ids;
    return { batches: await readAll(redis, account, api, ids), hasMore };
  }
  const start = page.after ? ((await redis.zrevrank(index, page.after)) ?? -1) + 1 : 0;
  ids = page.after && start === 0 ? [] : await redis.zrevrange(index, start, start + page.limit);
  return { batches: await readAll(redis, account, api, ids.slice(0, page.limit)), hasMore: ids.length > page.limit };
}

/** The batches by id; those gone (kept past their time) leave the account's list. */
async function readAll(redis: Redis, account: string, api: BatchApi, ids: string[]): Promise<BatchRecord[]> {
  const read = await readBatches(redis, ids.map((id) => [account, id]));
  const gone = ids.filter((_, i) => read[i] === null);
  if (gone.length > 0) await redis.zrem(redisKeys.accountBatches(account, api), ...gone);
  return read.filter((b): b is BatchRecord => b !== null);
}

// KEYS: meta, todo. Ends a batch's queue: what has not started is cancelled; what runs finishes.
const CANCEL = luaScript(`
${LUA_NOW_MS}
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'validating' and status ~= 'in_progress' then return status or '' end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', now_ms)
return 'cancelling'
`);

/** Cancels a batch that has not ended; returns its status after (or before, for one that had ended); '' for none. */
export async function cancelBatch(redis: Redis, account: string, id: string): Promise<string> {
  const keys = redisKeys.batch(account, id);
  return String(await CANCEL.run(redis, [keys.meta, keys.todo], []));
}

/** Deletes a batch and its results (its lines have ended). */
export async function deleteBatch(redis: Redis, account: string, id: string, api: BatchApi): Promise<void> {
  await redis.multi().del(...allKeys(account, id)).zrem(redisKeys.accountBatches(account, api), id).exec();
  await releaseStoredBytes(redis, account, `batch:${id}`);
}

// KEYS: meta, todo, in-flight, results, tries, lines. ARGV: how many, lease ms, the claim's token.
// Puts back the lines whose replica stopped renewing their lease, ends the
// queue of a batch past its window, then claims up to `how many` lines:
// replies 'run', the batch's API, endpoint and key, and per line its number,
// its tries and its stored text.
// Replies 'finalize' to the one caller that finds the batch drained (or
// finalizing, stalled past a lease), else the batch's status.
const CLAIM = luaScript(`
${LUA_NOW_MS}
${LUA_INT}
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'gone'} end
local lease = tonumber(ARGV[2])
if status == 'finalizing' then
  if now_ms - tonumber(redis.call('HGET', KEYS[1], 'finalizing_at')) < lease then return {status} end
  redis.call('HSET', KEYS[1], 'finalizing_at', now_ms)
  return {'finalize'}
end
if status ~= 'in_progress' and status ~= 'cancelling' then return {status} end
local running = status == 'in_progress' and not redis.call('HGET', KEYS[1], 'ending')
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)) do
  redis.call('ZREM', KEYS[3], member)
  local line = string.match(member, '^(%d+)')
  if running and redis.call('HEXISTS', KEYS[4], line) == 0 then redis.call('LPUSH', KEYS[2], line) end
end
if running and now_ms >= tonumber(redis.call('HGET', KEYS[1], 'expires_at')) then
  redis.call('HSET', KEYS[1], 'ending', 'expired')
  redis.call('DEL', KEYS[2])
  running = false
end
local out = {'run', unpack(redis.call('HMGET', KEYS[1], 'api', 'endpoint', 'key'))}
if running then
  for _ = 1, tonumber(ARGV[1]) do
    local line = redis.call('LPOP', KEYS[2])
    if not line then break end
    out[#out + 1] = line
    out[#out + 1] = redis.call('HINCRBY', KEYS[5], line, 1)
    out[#out + 1] = redis.call('HGET', KEYS[6], line) or ''
    redis.call('ZADD', KEYS[3], int(now_ms + lease), line .. ':' .. ARGV[3])
  end
end
if #out == 4 and redis.call('LLEN', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[3]) == 0 then
  if status == 'cancelling' then redis.call('HSET', KEYS[1], 'ending', 'cancelled') end
  redis.call('HSET', KEYS[1], 'status', 'finalizing', 'finalizing_at', now_ms)
  return {'finalize'}
end
return out
`);

export interface ClaimedLine {
  line: string;
  tries: number;
  /** The stored line, or null where it is gone (its batch was deleted). */
  stored: StoredLine | null;
}

/** Whose a batch is and what it calls: what running its lines needs. */
export interface BatchCall {
  api: BatchApi;
  endpoint: string;
  keyId: string;
}

export type Claim = { kind: 'run'; batch?: BatchCall; lines: ClaimedLine[] } | { kind: 'finalize' } | { kind: 'ended'; status: string } | { kind: 'gone' };

const batchKeyList = (account: string, id: string) => {
  const k = redisKeys.batch(account, id);
  return [k.meta, k.todo, k.inFlight, k.results, k.tries, k.lines];
};

export async function claimLines(redis: Redis, account: string, id: string, count: number, leaseMs: number, token: string): Promise<Claim> {
  const reply = (await CLAIM.run(redis, batchKeyList(account, id), [count, leaseMs, token])) as (string | number)[];
  if (reply[0] === 'finalize') return { kind: 'finalize' };
  // No hash: a batch not stored yet, or one whose storing never finished.
  if (reply[0] === 'gone') return { kind: 'gone' };
  // Another replica is finalizing it: nothing to run, but it stays in the queue until that is done (or stalls).
  if (reply[0] === 'finalizing') return { kind: 'run', lines: [] };
  if (reply[0] !== 'run') return { kind: 'ended', status: String(reply[0]) };
  const lines: ClaimedLine[] = [];
  for (let i = 4; i < reply.length; i += 3) {
    const text = String(reply[i + 2]);
    const [customId, body] = text ? (JSON.parse(text) as [string, Record<string, unknown>]) : ['', {}];
    lines.push({ line: String(reply[i]), tries: Number(reply[i + 1]), stored: text ? { customId, body } : null });
  }
  return { kind: 'run', batch: { api: reply[1] as BatchApi, endpoint: String(reply[2]), keyId: String(reply[3]) }, lines };
}

// KEYS: in-flight. ARGV: lease ms, members. Pushes the leases of lines still running here.
const RENEW = luaScript(`
${LUA_NOW_MS}
${LUA_INT}
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', int(now_ms + tonumber(ARGV[1])), ARGV[i]) end
return 0
`);

export async function renewLeases(redis: Redis, account: string, id: string, leaseMs: number, members: string[]): Promise<void> {
  await RENEW.run(redis, [redisKeys.batch(account, id).inFlight], [leaseMs, ...members]);
}

// KEYS: in-flight, results, lines. ARGV: member, line, failure result ('' where the settlement wrote a success).
// A line ends: a failure is written where the line has no result (and its batch is still there).
const END_LINE = luaScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[3] ~= '' and redis.call('HEXISTS', KEYS[2], '#total') == 1 and redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 1 then
  redis.call('HINCRBY', KEYS[2], '#errored', 1)
end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then redis.call('HDEL', KEYS[3], ARGV[2]) end
return 0
`);

export async function endLine(redis: Redis, account: string, id: string, member: string, line: string, failure = ''): Promise<void> {
  const k = redisKeys.batch(account, id);
  await END_LINE.run(redis, [k.inFlight, k.results, k.lines], [member, line, failure]);
}

// KEYS: meta, in-flight, todo, tries. ARGV: member, line. A line that could not run now (no room, a rate window
// full, a replica stopping) goes back to the front of the queue, its try not counted.
const RELEASE = luaScript(`
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[4], ARGV[2], -1)
if redis.call('HGET', KEYS[1], 'status') == 'in_progress' and not redis.call('HGET', KEYS[1], 'ending') then redis.call('LPUSH', KEYS[3], ARGV[2]) end
return 1
`);

export async function releaseLine(redis: Redis, account: string, id: string, member: string, line: string): Promise<void> {
  const k = redisKeys.batch(account, id);
  await RELEASE.run(redis, [k.meta, k.inFlight, k.todo, k.tries], [member, line]);
}

/** A batch's results, in input order, a page at a time: each line's stored result, or for a line without one, its custom id. */
export async function* resultPages(redis: Redis, account: string, id: string, total: number): AsyncGenerator<({ result: string } | { unrun: string })[]> {
  const k = redisKeys.batch(account, id);
  const PAGE = 500;
  for (let start = 0; start < total; start += PAGE) {
    const fields = Array.from({ length: Math.min(PAGE, total - start) }, (_, i) => String(start + i));
    const results = await redis.hmget(k.results, ...fields);
    const missing = fields.filter((_, i) => results[i] === null);
    const stored = missing.length > 0 ? await redis.hmget(k.lines, ...missing) : [];
    const customIds = new Map(missing.map((f, i) => [f, stored[i] ? (JSON.parse(stored[i]!) as [string])[0] : '']));
    yield fields.map((f, i) => (results[i] !== null ? { result: results[i]! } : { unrun: customIds.get(f)! }));
  }
}

// KEYS: meta, every other key of the batch, then the output and error files' hashes, the account's file list, its
// stored bytes' two keys and its list of batch outputs. ARGV: status, keep ms, then per file (output, error) its id,
// its bytes, its name and when made ('' id: none).
const FINISH = luaScript(`
${LUA_NOW_MS}
${LUA_INT}
${LUA_KEEP_STORED_FOR(10, 11)}
if redis.call('HGET', KEYS[1], 'status') ~= 'finalizing' then return 0 end
local keep = tonumber(ARGV[2])
local at = { completed = 'completed_at', expired = 'expired_at', cancelled = 'cancelled_at' }
redis.call('HSET', KEYS[1], 'status', ARGV[1], at[ARGV[1]], now_ms, 'output_file_id', ARGV[3], 'error_file_id', ARGV[6])
for i, part in ipairs({ 'output', 'error' }) do
  local id, file = ARGV[3 * i], KEYS[6 + i]
  if id ~= '' then
    redis.call('HSET', file, 'purpose', 'batch_output', 'batch', string.match(KEYS[1], '[^:]+$'), 'part', part, 'bytes', ARGV[3 * i + 1], 'filename', ARGV[3 * i + 2], 'created_at', now_ms, 'expires_at', int(now_ms + keep))
    redis.call('PEXPIRE', file, keep)
    redis.call('ZADD', KEYS[9], now_ms, id)
    redis.call('ZADD', KEYS[12], now_ms, id)
  end
end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], keep) end
keep_for('batch:' .. string.match(KEYS[1], '[^:]+$'), keep)
return 1
`);

export interface FinishedFile {
  id: string;
  bytes: number;
  filename: string;
}

/** Ends a drained batch: its final status, its result files, and how long it all is kept. */
export async function finishBatch(redis: Redis, account: string, id: string, status: 'completed' | 'expired' | 'cancelled', files: { output: FinishedFile | null; error: FinishedFile | null }, keepMs: number): Promise<void> {
  const k = redisKeys.batch(account, id);
  const fileKey = (f: FinishedFile | null) => redisKeys.file(account, f?.id ?? `none-${id}`).meta;
  const args = [files.output, files.error].flatMap((f) => [f?.id ?? '', f?.bytes ?? 0, f?.filename ?? '']);
  const stored = redisKeys.storedBytes(account);
  const fileKeys = [fileKey(files.output), fileKey(files.error), redisKeys.accountFiles(account)];
  await FINISH.run(redis, [k.meta, k.lines, k.todo, k.inFlight, k.tries, k.results, ...fileKeys, stored.items, stored.sizes, redisKeys.accountFilesOf(account, 'batch_output')], [status, keepMs, ...args]);
}

/** How a finalizing batch ends: cancelled, expired (its window ended its queue), or completed. */
export async function finalStatus(redis: Redis, account: string, id: string): Promise<'completed' | 'expired' | 'cancelled'> {
  const ending = await redis.hget(redisKeys.batch(account, id).meta, 'ending');
  return ending === 'cancelled' || ending === 'expired' ? ending : 'completed';
}
