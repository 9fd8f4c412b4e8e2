// Calls to upstream endpoints over undici, with pooled keep-alive
// connections, and the reading of their replies through a dialect.
import { Agent, request, errors as undiciErrors } from 'undici';
import type { StreamEvent } from '../protocol/chat-response.js';
import { ApiError, upstreamFailed, upstreamUnreachable } from '../protocol/errors.js';
import { UpstreamBrokeOff, type Dialect } from './dialect.js';
import { SseParser } from './sse-parser.js';

export interface UpstreamEndpoint {
  url: string;
  apiKey: string | undefined;
  dialect: Dialect;
}

export interface UpstreamTimeouts {
  firstByteMs: number;
  idleMs: number;
}

export type UpstreamBody = Awaited<ReturnType<typeof request>>['body'];

const agent = new Agent({ keepAliveTimeout: 30_000, connections: 1024 });

/**
 * Sends the request and waits for the upstream's status. A 2xx resolves to
 * its body; anything else, or no answer, rejects with the ApiError the caller
 * should see.
 */
export async function postChatCompletion(
  endpoint: UpstreamEndpoint,
  body: Record<string, unknown>,
  signal: AbortSignal,
  timeouts: UpstreamTimeouts,
): Promise<UpstreamBody> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: body.stream ? 'text/event-stream' : 'application/json' };
  if (endpoint.apiKey) headers.authorization = `Bearer ${endpoint.apiKey}`;
  let res;
  try {
    res = await request(`${endpoint.url}/chat/completions`, {
      dispatcher: agent,
      method: 'POST',
      headers,
      body: JSON.stringify(body),
      signal,
      headersTimeout: timeouts.firstByteMs,
      bodyTimeout: timeouts.idleMs,
    });
  } catch (err) {
    if (signal.aborted) throw err;
    throw err instanceof undiciErrors.HeadersTimeoutError ? upstreamFailed(describeFailure(err)) : upstreamUnreachable(describeFailure(err));
  }
  if (res.statusCode >= 200 && res.statusCode < 300) return res.body;
  let text = '';
  try {
    text = await res.body.text();
  } catch {
    // the status alone says enough
  }
  throw endpoint.dialect.error(res.statusCode, text);
}

export async function readCompletion(endpoint: UpstreamEndpoint, body: UpstreamBody) {
  let json: unknown;
  try {
    json = await body.json();
  } catch (err) {
    throw upstreamFailed(err instanceof SyntaxError ? 'the reply was not JSON' : describeFailure(err));
  }
  try {
    return endpoint.dialect.completion(json);
  } catch (err) {
    if (err instanceof UpstreamBrokeOff) throw upstreamFailed(err.message);
    throw err;
  }
}

/**
 * The upstream's stream as batches of normalized events, one batch per
 * network read. Ends normally only on a complete reply: `[DONE]`, or the end
 * of the body once every choice has its finish_reason. Anything else throws
 * UpstreamBrokeOff.
 */
export async function* readStream(endpoint: UpstreamEndpoint, body: UpstreamBody): AsyncGenerator<StreamEvent[]> {
  const parser = new SseParser();
  const open = new Set<number>();
  let sawChoice = false;
  // Events before a bad one in the same read still reach the client; then the failure.
  const normalize = (batch: ReturnType<SseParser['push']>): { events: StreamEvent[]; failure?: unknown } => {
    const events: StreamEvent[] = [];
    for (const ev of batch) {
      let event: StreamEvent;
      try {
        event = endpoint.dialect.streamEvent(ev);
      } catch (failure) {
        return { events, failure };
      }
      for (const c of event.choices ?? []) {
        sawChoice = true;
        if (c.finish_reason) open.delete(c.index);
        else open.add(c.index);
      }
      events.push(event);
    }
    return { events };
  };
  const deliver = function* ({ events, failure }: ReturnType<typeof normalize>) {
    if (events.length > 0) yield events;
    if (failure) throw failure;
    return events.some((e) => e.done);
  };
  // After [DONE] the rest of the body is read and dropped rather than the body destroyed:
  // destroying it would close the connection, and the next request would pay for a new one.
  let done = false;
  try {
    body.setEncoding('utf8');
    for await (const text of body as AsyncIterable<string>) {
      if (!done) done = yield* deliver(normalize(parser.push(text)));
    }
    if (!done) done = yield* deliver(normalize(parser.end()));
  } catch (err) {
    if (done) return;
    if (err instanceof UpstreamBrokeOff || err instanceof ApiError) throw err;
    throw new UpstreamBrokeOff(describeFailure(err));
  }
  // Some servers close without [DONE]; the reply is whole if every choice finished.
  if (!done && (!sawChoice || open.size > 0)) throw new UpstreamBrokeOff('the upstream closed the stream before the reply was complete');
}

function describeFailure(err: unknown): string {
  if (err instanceof undiciErrors.HeadersTimeoutError) return 'no answer before the first-byte timeout';
  if (err instanceof undiciErrors.BodyTimeoutError) return 'the upstream went silent past the idle timeout';
  const e = err as { code?: string; message?: string; cause?: { code?: string } };
  return e.cause?.code ?? e.code ?? e.message ?? 'unknown failure';
}
