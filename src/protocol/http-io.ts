// Reading a JSON request body and writing JSON answers and event streams in
// the wire format, shared by the gateway and the local engine.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Writable } from 'node:stream';
import { ApiError, bodyTooDense, bodyTooLarge, Cancelled, invalidJson, malformedUrl, openAiError, unsupportedContentType, type ErrorShape } from './errors.js';

/** One percent-encoded segment of a URL path, decoded; a 400 where its encoding is malformed (`%E0`, a lone `%`). */
export function decodePathSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw malformedUrl();
  }
}

/** A body's chunks as JSON; a 400 for no text or text that is not JSON. */
export function parseJsonBody(chunks: Buffer[], size: number): unknown {
  const text = chunks.length === 1 ? chunks[0].toString('utf8') : Buffer.concat(chunks, size).toString('utf8');
  if (text.trim() === '') throw invalidJson('the body is empty');
  try {
    return JSON.parse(text);
  } catch (err) {
    throw invalidJson((err as Error).message);
  }
}

/**
 * A body is looked at before it is parsed once it is this large. JSON.parse takes about 0.25 µs an object or
 * array, so 4 MiB of `{},` (1.4 million of them) held the main thread 300 to 350 ms, where 4 MiB of an agent's
 * conversation takes about 11 and of numbers 40: a request refused for its content is free to its sender, and
 * every other request on the replica waits out its parse. Smaller bodies cost at most 20-odd ms however they are
 * made, and are not looked at.
 */
const CHECKED_FROM_BYTES = 256 * 1024;
/**
 * At most one object or array per this many bytes of a large body: a request Claude Code sent had one per 366
 * (its tools one per 289), a conversation of tiny tool results has one per 20; 4 MiB of `{},` has one per 3.
 */
const BYTES_PER_CONTAINER = 16;

/**
 * Whether `bytes` of JSON hold more than `most` objects and arrays, counted outside strings (7 ms for 4 MiB of
 * a conversation, whose parse takes 11). Stops at `most`.
 */
function holdsMoreContainers(bytes: Buffer, most: number): boolean {
  let count = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if ((c === 0x7b || c === 0x5b) && ++count > most) return true;
  }
  return false;
}

/** The 400 for JSON of `bytes` too dense with objects and arrays to be parsed; undefined for JSON that may be. */
export function tooDense(bytes: Buffer): ApiError | undefined {
  if (bytes.length < CHECKED_FROM_BYTES || !holdsMoreContainers(bytes, bytes.length / BYTES_PER_CONTAINER)) return undefined;
  return bodyTooDense(BYTES_PER_CONTAINER);
}

/** A request body's chunks as JSON, a large one first checked for how densely it holds objects and arrays. */
function parseRequestBody(chunks: Buffer[], size: number): unknown {
  if (size < CHECKED_FROM_BYTES) return parseJsonBody(chunks, size);
  const bytes = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
  const refusal = tooDense(bytes);
  if (refusal) throw refusal;
  return parseJsonBody([bytes], size);
}

/** Where a body's bytes are counted as they arrive: the refusal once they pass what the caller may have in flight. */
export interface BodyAllowance {
  take(bytes: number): ApiError | null;
}

export function readJsonBody(req: IncomingMessage, limitBytes: number, allowance?: BodyAllowance): Promise<unknown> {
  return readJson(req, limitBytes, parseRequestBody, allowance);
}

/**
 * A JSON request's body as the chunks it came in, to be parsed elsewhere (a batch's, on its intake thread, which
 * joins them). Joined here, in one Buffer.concat, a create of 32 MiB held the main thread 100 to 130 ms on a 2-core
 * machine (every other request on the replica waiting it out), and more on CI's; handed over as they came, the
 * longest stall was 14 to 35 ms (test/batches/large-lines.test.ts). Each chunk is a buffer of its own (Node's HTTP
 * parser copies a body's bytes out of the socket's), so it is handed over, not copied again.
 */
export function readJsonChunks(req: IncomingMessage, limitBytes: number, allowance?: BodyAllowance): Promise<Buffer[]> {
  return readJson(req, limitBytes, (chunks) => chunks, allowance);
}

function readJson<T>(req: IncomingMessage, limitBytes: number, decode: (chunks: Buffer[], size: number) => T, allowance?: BodyAllowance): Promise<T> {
  if (req.destroyed) return Promise.reject(new Cancelled());
  const type = req.headers['content-type'];
  if (type !== undefined && !/^application\/(.+\+)?json\b/i.test(type)) return Promise.reject(unsupportedContentType(type));
  return readBody(req, limitBytes, decode, allowance);
}

/**
 * A request's body, up to `limitBytes` (past it, a 413) and what `allowance` lets it take, as `decode` makes it of
 * the chunks that came; what `decode` throws rejects. A client gone part-way is Cancelled.
 */
export function readBody<T>(req: IncomingMessage, limitBytes: number, decode: (chunks: Buffer[], size: number) => T, allowance?: BodyAllowance): Promise<T> {
  // A client that left before the body was read (while its key was looked up) sends no more events: waiting would be for ever.
  if (req.destroyed) return Promise.reject(new Cancelled());
  const declared = Number(req.headers['content-length']);
  if (declared > limitBytes) return Promise.reject(bodyTooLarge(limitBytes));
  // Events rather than an async iterator, which costs a promise per chunk on every request.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      const refusal = size > limitBytes ? bodyTooLarge(limitBytes) : (allowance?.take(chunk.length) ?? null);
      if (!refusal) return void chunks.push(chunk);
      req.off('data', onData);
      req.off('end', onEnd);
      reject(refusal);
    };
    const onEnd = () => {
      try {
        resolve(decode(chunks, size));
      } catch (err) {
        reject(err);
      }
    };
    req.on('data', onData);
    req.once('end', onEnd);
    // A client that leaves half-way through its body is gone, not a failure of Parley's.
    req.once('error', () => reject(new Cancelled()));
    req.once('close', () => {
      if (!req.complete) reject(new Cancelled());
    });
  });
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  // Object.assign, not a spread: V8 (Node 20) copies header objects several times slower by spread, and
  // every reply's headers are put together this way (also in the gateway's chat completions and stream relay).
  res.writeHead(status, Object.assign({ 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }, headers));
  res.end(text);
}

/** A JSON reply already written, in parts (text around bytes passed on as they came). */
export function sendJsonParts(res: ServerResponse, parts: (string | Buffer)[], headers: Record<string, string> = {}): void {
  const length = parts.reduce((sum, p) => sum + (typeof p === 'string' ? Buffer.byteLength(p) : p.length), 0);
  res.writeHead(200, Object.assign({ 'content-type': 'application/json', 'content-length': length }, headers));
  for (const part of parts) res.write(part);
  res.end();
}

/**
 * Resolves once `out` can take more (drain) or is gone (close), whichever comes first, leaving no listener behind:
 * a client that stops reading and leaves never drains, and a wait per write must not pile up listeners. One that
 * stops reading and stays is destroyed after `timeoutMs` (the routing file's `clientSendTimeoutMs`), which closes it.
 */
export function drainedOrClosed(out: Writable, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const stalled = setTimeout(() => out.destroy(), timeoutMs);
    const done = () => {
      clearTimeout(stalled);
      out.off('drain', done);
      out.off('close', done);
      resolve();
    };
    out.on('drain', done);
    out.on('close', done);
  });
}

/**
 * Cuts off a reply its client takes none of for `timeoutMs` (the routing file's `clientSendTimeoutMs`), as nginx's
 * send_timeout does, so that a client that stops reading does not keep a whole reply in Node's memory for ever.
 * The socket's own timeout: Node counts a write the kernel is still taking a part of at a time as activity, so a
 * client that reads slowly reads on, and once the reply is all written Node sets the connection's keep-alive timeout
 * in its place. With no listener for it, Node destroys the socket when it fires.
 */
export function cutOffWhenStalled(res: ServerResponse, timeoutMs: number): void {
  if (!res.writableFinished && !res.destroyed) res.socket?.setTimeout(timeoutMs);
}

/** A download's parts are about this many bytes at most (a stored file's, a batch's results, a page of usage events). */
export const DOWNLOAD_PART_BYTES = 1024 * 1024;

/**
 * A download of text or bytes as they come, waiting on the client where it reads slower than they come (at most
 * `sendTimeoutMs` without taking any); reading stops where the client has left. A client that reads slowly keeps
 * a part in memory: for a tenant's download, a part (or the whole of a `size` under one) counts against its
 * account's bytes in flight, as a body does (refused with its 429 past them), or one tenant's downloads, as many
 * as its rate window opens, could each keep one.
 */
export async function sendDownload(res: ServerResponse, headers: Record<string, string>, parts: AsyncIterable<string | Buffer>, sendTimeoutMs: number, tenant?: { allowance: BodyAllowance; size?: number }): Promise<void> {
  const overAllowance = tenant?.allowance.take(Math.min(tenant.size ?? DOWNLOAD_PART_BYTES, DOWNLOAD_PART_BYTES));
  if (overAllowance) throw overAllowance;
  res.writeHead(200, headers);
  for await (const part of parts) {
    if (!res.write(part)) await drainedOrClosed(res, sendTimeoutMs);
    if (res.destroyed) return;
  }
  res.end();
}

export function sendError(res: ServerResponse, err: ApiError, shape: ErrorShape = openAiError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const { status, body } = shape(err);
  sendJson(res, status, body, err.headers);
}

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
} as const;
