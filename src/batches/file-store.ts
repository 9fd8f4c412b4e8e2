// Files in Redis, in their account's slot: the JSONL a team uploads for a
// batch, and the output and error files a finished batch makes. An upload's
// bytes are kept as they came (appended a MiB at a time, so no one command
// holds Redis long); a batch's files are read from its results when asked
// for, so no result is stored twice.
import type { Redis } from 'ioredis';
import { DOWNLOAD_PART_BYTES } from '../protocol/http-io.js';
import { redisKeys } from '../redis/keys.js';
import { luaScript } from '../redis/lua-script.js';
import { execAll, writeInParts } from '../redis/pipelines.js';
import { keepStoredFor, releaseStoredBytes, storeCounted } from './stored-bytes.js';

export interface FileRecord {
  id: string;
  filename: string;
  purpose: string;
  bytes: number;
  createdAt: number;
  expiresAt: number | null;
  /** For a batch's output or error file: the batch, and which. */
  batch: { id: string; part: 'output' | 'error' } | null;
}


/** What a file is for: an upload for a batch's input, or a batch's output or error file. */
export const FILE_PURPOSES = ['batch', 'batch_output'] as const;

/**
 * The most files one list answers: reading each costs the replica about 0.1 ms of CPU (`node
 * bench/tenant-data-costs.mjs`: 92 ms for 1,000), so a list of OpenAI's own most, 10,000, took 0.4 s, and an
 * account's rate window lets it ask 16 times a second. Past it, the list says it has more, as any page does.
 */
export const FILES_PER_LIST = 1_000;

/** How long a sorting of an account's files by purpose stands before it is checked again. */
const PURPOSES_CHECKED_MS = 3_600_000;

/** Files read from a list at a time. */
const LIST_PAGE = 100;

/** How long an upload's bytes are counted before it is stored: a replica that dies part-way gives them back then. */
const UPLOAD_MS = 10 * 60_000;

/**
 * Stores an upload: its bytes counted against the account's cap first (refused past it: stored-bytes.ts), for as
 * long as an upload may take, then for as long as the file is kept.
 */
export async function createFile(redis: Redis, account: string, f: { id: string; filename: string; purpose: string; content: Buffer[] }, keep: { ms: number; capBytes: number }): Promise<FileRecord> {
  const item = `file:${f.id}` as const;
  const bytes = f.content.reduce((sum, piece) => sum + piece.length, 0);
  return storeCounted(redis, account, item, { bytes, capBytes: keep.capBytes, keepMs: UPLOAD_MS, param: 'file' }, async () => {
    const keys = redisKeys.file(account, f.id);
    const now = Date.now();
    await writeInParts(
      async () => {
        // The pieces as they came (a request body's chunks), cut to a MiB at most, about a MiB of them a command.
        const pieces = f.content.flatMap((piece) => Array.from({ length: Math.ceil(piece.length / DOWNLOAD_PART_BYTES) }, (_, k) => piece.subarray(k * DOWNLOAD_PART_BYTES, (k + 1) * DOWNLOAD_PART_BYTES)));
        for (let i = 0; i < pieces.length; ) {
          const write = redis.pipeline();
          for (let size = 0; i < pieces.length && size < DOWNLOAD_PART_BYTES; i++) {
            write.append(keys.content, pieces[i]);
            size += pieces[i].length;
          }
          await execAll(write.pexpire(keys.content, keep.ms));
        }
      },
      () =>
        redis
          .multi()
          .hset(keys.meta, { filename: f.filename, purpose: f.purpose, bytes, created_at: now, expires_at: now + keep.ms })
          .pexpire(keys.meta, keep.ms)
          .zadd(redisKeys.accountFiles(account), now, f.id)
          .zadd(redisKeys.accountFilesOf(account, f.purpose), now, f.id)
          .exec(),
      () => redis.del(keys.content),
    );
    await keepStoredFor(redis, account, item, keep.ms);
    return { id: f.id, filename: f.filename, purpose: f.purpose, bytes, createdAt: now, expiresAt: now + keep.ms, batch: null };
  });
}

function recordOf(id: string, m: Record<string, string>): FileRecord {
  return {
    id, filename: m.filename, purpose: m.purpose, bytes: Number(m.bytes), createdAt: Number(m.created_at), expiresAt: m.expires_at ? Number(m.expires_at) : null,
    batch: m.batch ? { id: m.batch, part: m.part as 'output' | 'error' } : null,
  };
}

export async function readFile(redis: Redis, account: string, id: string): Promise<FileRecord | null> {
  const m = await redis.hgetall(redisKeys.file(account, id).meta);
  return m.purpose ? recordOf(id, m) : null;
}

/** An uploaded file's bytes, a download's part at a time. */
export async function* uploadedContent(redis: Redis, account: string, id: string, bytes: number): AsyncGenerator<Buffer> {
  const key = redisKeys.file(account, id).content;
  for (let at = 0; at < bytes; at += DOWNLOAD_PART_BYTES) yield await redis.getrangeBuffer(key, at, Math.min(at + DOWNLOAD_PART_BYTES, bytes) - 1);
}

/**
 * An account's files, newest first (or oldest, with `order: 'asc'`), after a file id, at most FILES_PER_LIST; those
 * gone (expired) are dropped from the list. Of one purpose, from that purpose's own list: read from the list of
 * all, a tenant with 100,000 batch outputs asking for its uploads had every one of them read at each ask.
 */
export async function listFiles(redis: Redis, account: string, page: { limit: number; after?: string; purpose?: string; order: 'asc' | 'desc' }): Promise<{ files: FileRecord[]; hasMore: boolean }> {
  const files: FileRecord[] = [];
  if (page.purpose !== undefined && !(FILE_PURPOSES as readonly string[]).includes(page.purpose)) return { files, hasMore: false };
  if (page.purpose !== undefined) await listByPurpose(redis, account);
  const index = page.purpose === undefined ? redisKeys.accountFiles(account) : redisKeys.accountFilesOf(account, page.purpose);
  const limit = Math.min(page.limit, FILES_PER_LIST);
  const rank = page.after ? (page.order === 'desc' ? await redis.zrevrank(index, page.after) : await redis.zrank(index, page.after)) : -1;
  let start = (rank ?? -1) + 1;
  for (;;) {
    const ids = page.order === 'desc' ? await redis.zrevrange(index, start, start + LIST_PAGE - 1) : await redis.zrange(index, start, start + LIST_PAGE - 1);
    if (ids.length === 0) return { files, hasMore: false };
    const metas = (await Promise.all(ids.map((id) => redis.hgetall(redisKeys.file(account, id).meta)))) as Record<string, string>[];
    const gone: string[] = [];
    for (const [i, m] of metas.entries()) {
      if (!m.purpose) gone.push(ids[i]);
      else {
        if (files.length === limit) return { files, hasMore: true };
        files.push(recordOf(ids[i], m));
      }
    }
    if (gone.length > 0) await redis.zrem(index, ...gone);
    start += ids.length - gone.length;
  }
}

// KEYS: a batch's results and lines. Frees every line's result, keeping the batch's counts.
const FORGET_RESULTS = luaScript(`
local total = tonumber(redis.call('HGET', KEYS[1], '#total') or '0')
for i = 0, total - 1, 1000 do
  local fields = {}
  for j = i, math.min(i + 999, total - 1) do fields[#fields + 1] = tostring(j) end
  redis.call('HDEL', KEYS[1], unpack(fields))
end
redis.call('DEL', KEYS[2])
return 0
`);

/**
 * Lists the account's files of each purpose apart, from the list of all, a page at a time: those stored before the
 * lists were kept, and again an hour later, for any a replica of the earlier code stored meanwhile (during an
 * upgrade). Files stored meanwhile are listed by their own writes; one deleted meanwhile may be listed after its
 * deletion, and is dropped as gone when next read.
 */
async function listByPurpose(redis: Redis, account: string): Promise<void> {
  const built = redisKeys.accountFilesByPurposeBuilt(account);
  if (await redis.exists(built)) return;
  const all = redisKeys.accountFiles(account);
  for (let start = 0; ; start += LIST_PAGE) {
    const read = await redis.zrange(all, start, start + LIST_PAGE - 1, 'WITHSCORES');
    if (read.length === 0) break;
    const purposes = redis.pipeline();
    for (let i = 0; i < read.length; i += 2) purposes.hget(redisKeys.file(account, read[i]).meta, 'purpose');
    const listing = redis.pipeline();
    for (const [i, [err, purpose]] of ((await purposes.exec()) ?? []).entries()) {
      if (err) throw err;
      if (typeof purpose === 'string') listing.zadd(redisKeys.accountFilesOf(account, purpose), read[2 * i + 1], read[2 * i]);
    }
    await execAll(listing);
  }
  await redis.set(built, '1', 'PX', PURPOSES_CHECKED_MS);
}

/** Deletes a file; a batch's results go once both its files are deleted. Answers whether there was one. */
export async function deleteFile(redis: Redis, account: string, file: FileRecord): Promise<boolean> {
  const keys = redisKeys.file(account, file.id);
  const [[, deleted]] = (await redis.multi().del(keys.meta, keys.content).zrem(redisKeys.accountFiles(account), file.id).zrem(redisKeys.accountFilesOf(account, file.purpose), file.id).exec()) as [unknown, number][];
  await releaseStoredBytes(redis, account, `file:${file.id}`);
  if (file.batch) {
    const batch = redisKeys.batch(account, file.batch.id);
    const [output, error] = await redis.hmget(batch.meta, 'output_file_id', 'error_file_id');
    const left = [output, error].filter((id) => id && id !== file.id);
    const stillThere = left.length > 0 ? await redis.exists(...left.map((id) => redisKeys.file(account, id!).meta)) : 0;
    if (stillThere === 0) await FORGET_RESULTS.run(redis, [batch.results, batch.lines], []);
  }
  return deleted > 0;
}
