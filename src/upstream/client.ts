// Calls to upstream endpoints over undici, with pooled keep-alive
// connections, and the reading of their replies through a dialect.
//
// Calls go through undici's dispatch API rather than request(): request()
// wraps every reply in a Node stream and an abort signal, which cost more
// than the rest of relaying a short reply. The body is read here instead,
// with the same backpressure: the socket pauses while the reader is behind.
import { StringDecoder } from 'node:string_decoder';
import { Agent, errors as undiciErrors, request, type Dispatcher } from 'undici';
import type { ChatMessage } from '../protocol/chat-request.js';
import type { StreamEvent } from '../protocol/chat-response.js';
import { ApiError, Cancelled, upstreamFailed, upstreamUnreachable } from '../protocol/errors.js';
import type { Cancellation } from './cancellation.js';
import type { Dialect, GenerationMapping } from './dialect.js';
import { readEngineLoad, type EngineLoad } from './engine-load.js';
import type { SseParser, SseEvent } from './sse-parser.js';
import { UpstreamBrokeOff } from './upstream-broke-off.js';

export interface UpstreamEndpoint {
  url: string;
  apiKey: string | undefined;
  dialect: Dialect;
}

export interface UpstreamTimeouts {
  firstByteMs: number;
  idleMs: number;
}

const agent = new Agent({ keepAliveTimeout: 30_000, connections: 1024 });

/** Bytes not yet read past which the upstream's socket is paused. */
const HIGH_WATER_BYTES = 64 * 1024;

/**
 * One call's reply as undici delivers it: the status first, then the body,
 * read whole or as it arrives.
 */
export class UpstreamBody implements Dispatcher.DispatchHandler {
  statusCode = 0;
  private controller: Dispatcher.DispatchController | undefined;
  /** UTF-8 across reads: a character may be split between two. */
  private readonly decoder = new StringDecoder('utf8');
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private ended = false;
  private failure: Error | undefined;
  private discarding = false;
  private wake: (() => void) | undefined;
  private started: { resolve: () => void; reject: (err: Error) => void } | undefined;
  private unsubscribe: (() => void) | undefined;

  private constructor(private readonly cancellation: Cancellation) {}

  /** Sends the request; resolves once the upstream's status is in. */
  static send(options: Dispatcher.DispatchOptions, cancellation: Cancellation): Promise<UpstreamBody> {
    const body = new UpstreamBody(cancellation);
    return new Promise((resolve, reject) => {
      body.started = { resolve: () => resolve(body), reject };
      agent.dispatch(options, body);
      body.unsubscribe = cancellation.subscribe(() => body.controller?.abort(new Cancelled()));
    });
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.cancellation.cancelled) controller.abort(new Cancelled());
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number): void {
    this.statusCode = statusCode;
    this.started?.resolve();
    this.started = undefined;
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.discarding) return;
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes > HIGH_WATER_BYTES) controller.pause();
    this.notify();
  }

  onResponseEnd(): void {
    this.finish();
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.failure = err;
    this.started?.reject(err);
    this.started = undefined;
    this.finish();
  }

  /** The whole body as text. */
  async text(): Promise<string> {
    return (await this.bytes()).toString('utf8');
  }

  /**
   * The whole body as bytes, as they came. Read without an async generator: through two of them (reads, then
   * byteReads), a whole reply cost a dozen promises more, and `node bench/revision-ab.mjs 5a1abda~ whole 32 6 8`
   * gave this way 1.11 times the requests/s, 162 against 183 µs of main-thread CPU a request (2026-11-29; streamed,
   * with readEvents reading nextText in bf58a3d, `... bf58a3d~ streamed 32 6 6`: 1.11, 368 against 400 µs).
   */
  async bytes(): Promise<Buffer> {
    const chunks: Buffer[] = [];
    try {
      for (let read; (read = await this.nextRead()); ) chunks.push(read);
    } finally {
      this.stopUnlessEnded();
    }
    return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
  }

  /**
   * The text received since the last read, once there is some; at the end, what a character cut short leaves (if
   * anything), then undefined. A reader that stops before the end calls stopUnlessEnded.
   */
  async nextText(): Promise<string | undefined> {
    const read = await this.nextRead();
    if (read) return this.decoder.write(read);
    return this.decoder.end() || undefined;
  }

  /** Everything received since the last read, once there is some; undefined once the body has ended. */
  private async nextRead(): Promise<Buffer | undefined> {
    for (;;) {
      if (this.pending.length > 0) {
        const bytes = this.pending.length === 1 ? this.pending[0] : Buffer.concat(this.pending);
        this.pending = [];
        this.pendingBytes = 0;
        this.controller?.resume();
        return bytes;
      }
      if (this.failure) throw this.failure;
      if (this.ended) return undefined;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** A reader that stops early no longer wants the rest. */
  stopUnlessEnded(): void {
    if (!this.ended && !this.discarding) this.controller?.abort(new Error('the reply is no longer read'));
  }

  /**
   * Reads the rest of the body off the connection and drops it. Once a
   * reply is complete this keeps the connection for the next request, where
   * aborting would close it.
   */
  discardRest(): void {
    this.discarding = true;
    this.pending = [];
    this.controller?.resume();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  private finish(): void {
    this.ended = true;
    this.unsubscribe?.();
    this.notify();
  }
}

/** Where an endpoint's API `path` is posted, split as undici's dispatch wants it. */
const targets = new Map<string, { origin: string; path: string }>();
function apiTarget(baseUrl: string, path: string): { origin: string; path: string } {
  const key = baseUrl + path;
  let target = targets.get(key);
  if (!target) {
    const url = new URL(key);
    target = { origin: url.origin, path: url.pathname + url.search };
    targets.set(key, target);
  }
  return target;
}

/**
 * Whether a call failed on a kept-alive connection that the upstream closed
 * as the call was sent: the socket had read earlier replies and none of this
 * one. llama.cpp's server closes idle kept-alive connections, unannounced,
 * when all its HTTP threads are taken (with 16 streams at once on this VM a
 * plain client met it about 90 times in 30 s: `node
 * bench/real-upstream-ttft.mjs`). Such a call is sent once more, on a new
 * connection: closed so, it never reached the upstream's handler, and
 * counting it would open a healthy endpoint's circuit. An upstream that died
 * mid-call instead is found dead by the second try, as before.
 */
function closedAsReused(err: unknown): boolean {
  return err instanceof undiciErrors.SocketError && (err.socket?.bytesRead ?? 0) > 0;
}

/**
 * Sends the request and waits for the upstream's status. A 2xx resolves to
 * its body; anything else, or no answer, rejects with the ApiError the caller
 * should see.
 */
export async function postUpstream(
  endpoint: UpstreamEndpoint,
  /** The API's path under the endpoint's base URL: `/chat/completions`, `/embeddings`. */
  apiPath: string,
  body: Record<string, unknown>,
  cancellation: Cancellation,
  timeouts: UpstreamTimeouts,
  /** The W3C `traceparent` of the call's span, where the request is traced. */
  traceparent?: string,
): Promise<UpstreamBody> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: body.stream ? 'text/event-stream' : 'application/json' };
  if (endpoint.apiKey) headers.authorization = `Bearer ${endpoint.apiKey}`;
  if (traceparent) headers.traceparent = traceparent;
  const target = apiTarget(endpoint.url, apiPath);
  const options: Dispatcher.DispatchOptions = {
    // Named one by one, not spread: an object built by a spread and then added to took V8's slow path at
    // every request, and gave undici's reads of these options a new shape each time. Against the spread, `node
    // bench/fast-paths.mjs named-options 6 4` gave 1.07 times the whole requests/s at 32 connections (2026-11-27;
    // rounds 1.04 0.99 1.07 1.07; 549 against 558 µs of main-thread CPU a request), and behind a 20 ms first byte
    // at 16 connections (`... named-options 6 4 16 20`) 632 against 675 µs.
    origin: target.origin,
    path: target.path,
    method: 'POST',
    headers,
    body: JSON.stringify(body),
    headersTimeout: timeouts.firstByteMs,
    bodyTimeout: timeouts.idleMs,
  };
  let res;
  for (let tries = 1; !res; tries++) {
    try {
      res = await UpstreamBody.send(options, cancellation);
    } catch (err) {
      // A call its client has left ends as cancelled, whatever else went wrong meanwhile.
      if (cancellation.cancelled) throw new Cancelled();
      if (tries === 1 && closedAsReused(err)) continue;
      throw err instanceof undiciErrors.HeadersTimeoutError ? upstreamFailed(describeFailure(err)) : upstreamUnreachable(describeFailure(err));
    }
  }
  if (res.statusCode >= 200 && res.statusCode < 300) return res;
  let text = '';
  try {
    text = await res.text();
  } catch {
    // the status alone says enough
  }
  throw endpoint.dialect.error(res.statusCode, text);
}

/** A whole reply's bytes, as they came. */
export async function readBytes(body: UpstreamBody): Promise<Buffer> {
  try {
    return await body.bytes();
  } catch (err) {
    throw upstreamFailed(describeFailure(err));
  }
}

/** A whole reply (its body, or its text already read), read through `read` (one of the dialect's readers). */
export async function readWhole<T>(body: UpstreamBody | string, read: (json: unknown) => T): Promise<T> {
  let json: unknown;
  try {
    json = JSON.parse(typeof body === 'string' ? body : await body.text());
  } catch (err) {
    throw upstreamFailed(err instanceof SyntaxError ? 'the reply was not JSON' : describeFailure(err));
  }
  try {
    return read(json);
  } catch (err) {
    if (err instanceof UpstreamBrokeOff) throw upstreamFailed(err.message);
    throw err;
  }
}

/** One network read's events, normalized: those before a bad one, if any, and then its failure. */
interface NormalizedRead {
  events: StreamEvent[];
  failure?: unknown;
}

/**
 * The upstream's stream as batches of normalized events, one batch per
 * network read. Ends normally only on a complete reply: `[DONE]`, or the end
 * of the body once every choice has its finish_reason. Anything else throws
 * UpstreamBrokeOff.
 */
export const readStream = (api: GenerationMapping<unknown>, body: UpstreamBody) => readEvents(body, api.streamParser(), (e) => api.streamEvent(e));

async function* readEvents(body: UpstreamBody, parser: SseParser, eventOf: (event: SseEvent) => StreamEvent): AsyncGenerator<StreamEvent[]> {
  const open = new Set<number>();
  let sawChoice = false;
  const normalize = (batch: (SseEvent | StreamEvent)[]): NormalizedRead => {
    const events: StreamEvent[] = [];
    for (const ev of batch) {
      let event: StreamEvent;
      try {
        // The quick path's events come normalized already.
        event = 'data' in ev ? eventOf(ev) : ev;
      } catch (failure) {
        return { events, failure };
      }
      for (const c of event.choices ?? []) {
        sawChoice = true;
        if (c.finish_reason) open.delete(c.index);
        else open.add(c.index);
      }
      if (event.content) {
        sawChoice = true;
        open.add(event.content.index);
      }
      events.push(event);
    }
    return { events };
  };
  try {
    // A read's events go to the client even when a bad one follows; then its failure is thrown.
    for (;;) {
      const text = await body.nextText();
      const { events, failure } = normalize(text === undefined ? parser.end() : parser.push(text));
      if (events.length > 0) yield events;
      if (failure) throw failure;
      if (events.some((e) => e.done)) {
        // What follows [DONE] is read off and dropped, which keeps the connection for the next request.
        if (text !== undefined) body.discardRest();
        return;
      }
      if (text === undefined) break;
    }
  } catch (err) {
    if (err instanceof UpstreamBrokeOff || err instanceof ApiError) throw err;
    throw new UpstreamBrokeOff(describeFailure(err));
  } finally {
    body.stopUnlessEnded();
  }
  // Some servers close without [DONE]; the reply is whole if every choice finished.
  if (!sawChoice || open.size > 0) throw new UpstreamBrokeOff('the upstream closed the stream before the reply was complete');
}

function describeFailure(err: unknown): string {
  if (err instanceof undiciErrors.HeadersTimeoutError) return 'no answer before the first-byte timeout';
  if (err instanceof undiciErrors.BodyTimeoutError) return 'the upstream went silent past the idle timeout';
  const e = err as { code?: string; message?: string; cause?: { code?: string } };
  return e.cause?.code ?? e.code ?? e.message ?? 'unknown failure';
}

/** The header that carries the endpoint's key, where it has one, for calls beside the request path. */
export const keyHeader = (endpoint: UpstreamEndpoint): Record<string, string> => (endpoint.apiKey ? { authorization: `Bearer ${endpoint.apiKey}` } : {});

/** The largest metrics text read: vLLM's runs to a few hundred KiB with its histograms. */
const MAX_METRICS_BYTES = 8 * 1024 * 1024;

/** The engine's own report of its load (its dialect's gauges), or why there is none; never throws. */
export async function upstreamEngineLoad(endpoint: UpstreamEndpoint, timeoutMs: number): Promise<EngineLoad | { error: string }> {
  const source = endpoint.dialect.engineLoad;
  if (!source) return { error: 'this kind of upstream reports no load' };
  try {
    const res = await request(source.url(endpoint.url), { headers: keyHeader(endpoint), signal: AbortSignal.timeout(timeoutMs), headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return { error: `HTTP ${res.statusCode}` };
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > MAX_METRICS_BYTES) {
        res.body.destroy();
        return { error: `metrics text over ${MAX_METRICS_BYTES} bytes` };
      }
      chunks.push(chunk as Buffer);
    }
    return readEngineLoad(source, Buffer.concat(chunks).toString('utf8')) ?? { error: `no ${source.running} and ${source.waiting} gauges` };
  } catch (err) {
    const { name } = err as Error;
    return { error: name === 'TimeoutError' || name === 'AbortError' ? `no answer in ${timeoutMs} ms` : describeFailure(err) };
  }
}

/** How long a prompt count may take before the gateway estimates instead. */
const COUNT_TIMEOUT_MS = 2_000;

/** The upstream's own count of a chat prompt, where its dialect can ask for one; undefined when it cannot or does not answer in time. */
export async function upstreamPromptCount(endpoint: UpstreamEndpoint & { upstreamModel: string }, messages: ChatMessage[]): Promise<number | undefined> {
  const counting = endpoint.dialect.promptCount;
  if (!counting) return undefined;
  const headers = { 'content-type': 'application/json', ...keyHeader(endpoint) };
  try {
    const res = await fetch(counting.url(endpoint.url), { method: 'POST', headers, body: JSON.stringify(counting.body(messages, endpoint.upstreamModel)), signal: AbortSignal.timeout(COUNT_TIMEOUT_MS) });
    if (!res.ok) return undefined;
    const count = counting.read(await res.json());
    return typeof count === 'number' && Number.isInteger(count) && count >= 0 ? count : undefined;
  } catch {
    return undefined;
  }
}
