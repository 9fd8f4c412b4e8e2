// The batch APIs on the gateway: OpenAI's Files (/v1/files) and Batch API
// (/v1/batches), and Anthropic's Message Batches (/v1/messages/batches), on
// the same keys, credit and routing as every request. Everything is looked
// up under the caller's own account, so another account's file or batch is
// simply not there: 404.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Caller } from '../accounts/key-authenticator.js';
import { inputProblems, MAX_BATCH_BYTES, MAX_BATCH_LINES, takeBatch } from '../batches/batch-intake.js';
import { batchIntake } from '../batches/intake-thread.js';
import type { BatchInput, ReadInput } from '../batches/input-reading.js';
import { resultLines, type ResultPart } from '../batches/batch-results.js';
import { lineApi } from './batch-runner.js';
import { cancelBatch, deleteBatch, hasEnded, keepMsOf, listBatches, readBatch, type BatchRecord } from '../batches/batch-store.js';
import { createFile, deleteFile, listFiles, readFile, uploadedContent } from '../batches/file-store.js';
import { renderAnthropicBatch } from '../protocol/anthropic-batches.js';
import { ApiError, invalidParameter, routeNotFound } from '../protocol/errors.js';
import { decodePathSegment, readJsonBody, readJsonChunks, sendDownload, sendJson, type BodyAllowance } from '../protocol/http-io.js';
import { readMultipart } from '../protocol/multipart.js';
import { parseOpenAiBatchCreate, renderOpenAiBatch, renderOpenAiFile } from '../protocol/openai-batches.js';
import type { GatewayContext } from './context.js';
import { authenticate, countInWindow, knownRefusal } from './exchange.js';
import { failClosed } from './fail-closed.js';
import { randomId } from './random-ids.js';

const notFound = (what: string, id: string) => new ApiError(404, 'not_found_error', `No ${what} with id '${id}' was found.`, 'not_found', null);
const conflict = (message: string) => new ApiError(409, 'invalid_request_error', message, 'conflict');

const MULTIPART_OVERHEAD = 64 * 1024;

/** A page size from the query: `fallback` where absent, a 400 outside 1..max. */
function pageLimit(query: URLSearchParams, fallback: number, max: number): number {
  const given = query.get('limit');
  if (given === null) return fallback;
  const n = Number(given);
  if (!Number.isInteger(n) || n < 1 || n > max) throw invalidParameter('limit', `limit must be a whole number from 1 to ${max}.`);
  return n;
}

const keepMs = (ctx: GatewayContext) => keepMsOf(ctx.routing().settings.batches);

/** Reads a create's input on the intake thread, in its account's turn; dropped from the line if its client leaves first. */
function readOnIntake(caller: Caller, res: ServerResponse, input: BatchInput): Promise<ReadInput> {
  const gone = new AbortController();
  const leave = () => gone.abort();
  res.once('close', leave);
  return batchIntake.read(caller.account, input, gone.signal).finally(() => res.off('close', leave));
}

/** Whether `pieces` hold more than `most` lines: counted only that far (a file of 32 MiB of newlines took 350 ms to count whole). */
function moreLinesThan(pieces: Buffer[], most: number): boolean {
  let lines = 0;
  for (const piece of pieces) for (let at = piece.indexOf(10); at >= 0; at = piece.indexOf(10, at + 1)) if (++lines > most) return true;
  return false;
}

async function files(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, caller: Caller, body: BodyAllowance, method: string, rest: string[], query: URLSearchParams): Promise<void> {
  const { redis } = ctx;
  const account = caller.account;
  if (rest.length === 0 && method === 'POST') {
    const parts = await readMultipart(req, MAX_BATCH_BYTES + MULTIPART_OVERHEAD, body);
    const purposePart = parts.find((p) => p.name === 'purpose');
    const purpose = purposePart && purposePart.size <= 'batch'.length ? Buffer.concat(purposePart.data).toString('utf8') : undefined;
    const file = parts.find((p) => p.name === 'file' && p.filename !== null);
    if (purpose !== 'batch') throw invalidParameter('purpose', "Parley keeps files for batches: purpose must be 'batch'.");
    if (!file) throw invalidParameter('file', 'Missing the file part: send the JSONL file as the form field `file`.');
    if (file.size > MAX_BATCH_BYTES) throw invalidParameter('file', `A batch file may be at most ${MAX_BATCH_BYTES} bytes; this one is ${file.size}.`);
    if (moreLinesThan(file.data, MAX_BATCH_LINES)) throw invalidParameter('file', `A batch file may hold at most ${MAX_BATCH_LINES} lines.`);
    const keep = { ms: keepMs(ctx), capBytes: ctx.routing().settings.batches.storedBytesPerAccount };
    const stored = await createFile(redis, account, { id: `file-${randomId()}`, filename: (file.filename ?? 'input.jsonl').slice(0, 256), purpose, content: file.data }, keep);
    return sendJson(res, 200, renderOpenAiFile(stored));
  }
  if (rest.length === 0 && method === 'GET') {
    const order = query.get('order') ?? 'desc';
    if (order !== 'asc' && order !== 'desc') throw invalidParameter('order', "order must be 'asc' or 'desc'.");
    const page = await listFiles(redis, account, { limit: pageLimit(query, 10_000, 10_000), after: query.get('after') ?? undefined, purpose: query.get('purpose') ?? undefined, order });
    const data = page.files.map(renderOpenAiFile);
    return sendJson(res, 200, { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: page.hasMore });
  }
  const id = rest[0];
  const file = await readFile(redis, account, id);
  if (!file) throw notFound('file', id);
  if (rest.length === 1 && method === 'GET') return sendJson(res, 200, renderOpenAiFile(file));
  if (rest.length === 1 && method === 'DELETE') {
    await deleteFile(redis, account, file);
    return sendJson(res, 200, { id, object: 'file', deleted: true });
  }
  if (rest.length === 2 && rest[1] === 'content' && method === 'GET') {
    const { clientSendTimeoutMs } = ctx.routing().settings;
    const tenant = { allowance: body, size: file.bytes };
    if (!file.batch) return sendDownload(res, { 'content-type': 'application/octet-stream' }, uploadedContent(redis, account, id, file.bytes), clientSendTimeoutMs, tenant);
    const batch = await readBatch(redis, account, file.batch.id);
    if (!batch) throw notFound('file', id);
    return sendDownload(res, { 'content-type': 'application/jsonl' }, resultLines(redis, batch, file.batch.part), clientSendTimeoutMs, tenant);
  }
  throw routeNotFound(method, `/v1/files/${rest.join('/')}`);
}

async function openAiBatches(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, caller: Caller, body: BodyAllowance, method: string, rest: string[], query: URLSearchParams): Promise<void> {
  const { redis } = ctx;
  if (rest.length === 0 && method === 'POST') {
    const request = parseOpenAiBatchCreate(await readJsonBody(req, ctx.routing().settings.maxBodyBytes, body));
    if (request instanceof ApiError) throw request;
    const file = await readFile(redis, caller.account, request.input_file_id);
    if (!file) throw invalidParameter('input_file_id', `No file with id '${request.input_file_id}' was found.`);
    if (file.purpose !== 'batch') throw invalidParameter('input_file_id', "The input file must be one uploaded with purpose 'batch'.");
    // The file's bytes are held while the create runs, as a body's are: counted against the account's allowance,
    // or one stored file could be read into memory by as many creates at once as its rate window allows.
    const overAllowance = body.take(file.bytes);
    if (overAllowance) throw overAllowance;
    // Each part copied to a buffer of its own, which is handed to the intake thread and joined there (joined here,
    // a file of 32 MB stalled the main thread 100 to 150 ms: test/batches/large-lines.test.ts): ioredis's replies are
    // slices of buffers of several MiB it shares between replies, each of which would be copied whole.
    const parts: Buffer[] = [];
    for await (const part of uploadedContent(redis, caller.account, file.id, file.bytes)) parts.push(Buffer.from(part));
    const input = await readOnIntake(caller, res, { kind: 'openai', endpoint: request.endpoint, content: parts });
    const table = ctx.routing();
    const batch = await takeBatch({
      redis, table, caller, id: `batch_${randomId()}`, api: 'openai', endpoint: request.endpoint, inputFileId: file.id, metadata: request.metadata ?? null, input,
      problems: inputProblems(table, caller, lineApi('openai', request.endpoint), input),
    });
    ctx.batches?.wake(batch);
    return sendJson(res, 200, renderOpenAiBatch(batch));
  }
  if (rest.length === 0 && method === 'GET') {
    const page = await listBatches(redis, caller.account, 'openai', { limit: pageLimit(query, 20, 100), after: query.get('after') ?? undefined });
    const data = page.batches.map(renderOpenAiBatch);
    return sendJson(res, 200, { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: page.hasMore });
  }
  const batch = await ownBatch(ctx, caller, rest[0], 'batch');
  if (rest.length === 1 && method === 'GET') return sendJson(res, 200, renderOpenAiBatch(batch));
  if (rest.length === 2 && rest[1] === 'cancel' && method === 'POST') {
    const status = await cancelBatch(redis, caller.account, batch.id);
    if (status !== 'cancelling') throw conflict(`The batch cannot be cancelled: its status is '${status}'.`);
    ctx.batches?.wake(batch);
    return sendJson(res, 200, renderOpenAiBatch((await readBatch(redis, caller.account, batch.id))!));
  }
  throw routeNotFound(method, `/v1/batches/${rest.join('/')}`);
}

/** The caller's batch by id, of the API whose ids start with `prefix`. */
async function ownBatch(ctx: GatewayContext, caller: Caller, id: string, prefix: 'batch' | 'msgbatch'): Promise<BatchRecord> {
  const batch = id.startsWith(`${prefix}_`) ? await readBatch(ctx.redis, caller.account, id) : null;
  if (!batch) throw notFound(prefix === 'batch' ? 'batch' : 'message batch', id);
  return batch;
}

/** Where a client reads a message batch's results: on the host and scheme it called (behind a proxy, the ones it forwarded). */
function resultsUrl(req: IncomingMessage, id: string): string {
  const forwarded = (name: string) => String(req.headers[name] ?? '').split(',')[0].trim();
  const proto = forwarded('x-forwarded-proto') || 'http';
  const host = forwarded('x-forwarded-host') || req.headers.host || 'localhost';
  return `${proto}://${host}/v1/messages/batches/${encodeURIComponent(id)}/results`;
}

async function messageBatches(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, caller: Caller, body: BodyAllowance, method: string, rest: string[], query: URLSearchParams): Promise<void> {
  const { redis } = ctx;
  const render = (b: BatchRecord) => renderAnthropicBatch(b, resultsUrl(req, b.id));
  if (rest.length === 0 && method === 'POST') {
    const input = await readOnIntake(caller, res, { kind: 'anthropic', content: await readJsonChunks(req, MAX_BATCH_BYTES, body), maxLines: MAX_BATCH_LINES });
    const table = ctx.routing();
    // Anthropic refuses a create whose requests name models it does not serve, and keeps nothing.
    const [problem] = inputProblems(table, caller, 'messages', input);
    if (problem) throw invalidParameter(`requests[${(problem.line ?? 1) - 1}].params.model`, problem.message);
    const batch = await takeBatch({ redis, table, caller, id: `msgbatch_${randomId()}`, api: 'anthropic', endpoint: '/v1/messages', inputFileId: null, metadata: null, input, problems: [] });
    ctx.batches?.wake(batch);
    return sendJson(res, 200, render(batch));
  }
  if (rest.length === 0 && method === 'GET') {
    const page = await listBatches(redis, caller.account, 'anthropic', { limit: pageLimit(query, 20, 1000), after: query.get('after_id') ?? undefined, before: query.get('before_id') ?? undefined });
    const data = page.batches.map(render);
    return sendJson(res, 200, { data, has_more: page.hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
  }
  const batch = await ownBatch(ctx, caller, rest[0], 'msgbatch');
  const ended = hasEnded(batch.status);
  if (rest.length === 1 && method === 'GET') return sendJson(res, 200, render(batch));
  if (rest.length === 1 && method === 'DELETE') {
    if (!ended) throw invalidParameter(null, `Message batch ${batch.id} has not ended yet; cancel it first, then delete it once it has ended.`);
    await deleteBatch(redis, caller.account, batch.id, 'anthropic');
    return sendJson(res, 200, { id: batch.id, type: 'message_batch_deleted' });
  }
  if (rest.length === 2 && rest[1] === 'cancel' && method === 'POST') {
    await cancelBatch(redis, caller.account, batch.id);
    ctx.batches?.wake(batch);
    return sendJson(res, 200, render((await readBatch(redis, caller.account, batch.id))!));
  }
  if (rest.length === 2 && rest[1] === 'results' && method === 'GET') {
    if (!ended) throw invalidParameter(null, `Message batch ${batch.id} has not ended yet: its results can be read once its processing_status is 'ended'.`);
    return sendDownload(res, { 'content-type': 'application/x-jsonl' }, resultLines(redis, batch, 'all' satisfies ResultPart), ctx.routing().settings.clientSendTimeoutMs, { allowance: body });
  }
  throw routeNotFound(method, `/v1/messages/batches/${rest.join('/')}`);
}

const ROOTS = [
  ['/v1/files', files],
  ['/v1/batches', openAiBatches],
  ['/v1/messages/batches', messageBatches],
] as const;

/** Serves a batch API path; false for any other path. */
export async function handleBatchApis(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, method: string, path: string, search: string): Promise<boolean> {
  const root = ROOTS.find(([prefix]) => path === prefix || path.startsWith(`${prefix}/`));
  if (!root) return false;
  const rest = path.slice(root[0].length).split('/').filter((s) => s !== '').map(decodePathSegment);
  const caller = await authenticate(req, ctx);
  // Each call is one of the account's requests, and waits for its window's room: an upload or a create reads, checks
  // and stores up to MAX_BATCH_BYTES. None spends credit.
  const table = ctx.routing();
  const known = knownRefusal(ctx, caller, table, false);
  if (known) await known;
  await countInWindow(ctx, caller, table);
  await failClosed(root[1](req, res, ctx, caller, ctx.bodies.allowance(caller.account, res), method, rest, new URLSearchParams(search)));
  return true;
}
