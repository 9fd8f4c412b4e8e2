// Redis work done on a request's behalf fails closed: a Redis that cannot be
// reached means no answer (503), never a free reply. A Redis that answers
// with an error (one full under `noeviction`: "OOM command not allowed"), or
// does not answer in time (redis/connection.ts: GATEWAY_COMMAND_TIMEOUT_MS),
// fails the request alike, and is logged, at most once per REFUSAL_LOG_MS
// with a count of the rest: nothing else tells an operator why a Redis that
// is connected turns requests away.
import { ReplyError } from 'ioredis';
import { ApiError, Cancelled, stateUnavailable } from '../protocol/errors.js';

const REFUSAL_LOG_MS = 10_000;
/** ioredis's error for a command its commandTimeout ended. */
const COMMAND_TIMED_OUT = 'Command timed out';
let lastLogged = -Infinity;
let unlogged = 0;

function noteRefusal(err: Error): void {
  const now = performance.now();
  if (now - lastLogged < REFUSAL_LOG_MS) {
    unlogged++;
    return;
  }
  const more = unlogged > 0 ? ` (and ${unlogged} more since the last such line)` : '';
  console.warn(`parley: Redis did not take a request's work${more}: ${err.message}`);
  lastLogged = now;
  unlogged = 0;
}

/**
 * Awaits Redis work: any failure to reach Redis becomes the 503 the request is answered with. An ApiError raised
 * meanwhile passes through, and so does a TypeError or RangeError: Parley's own mistake, which no outage message
 * may hide (the server answers it as a 500 and logs it).
 */
export function failClosed<T>(work: Promise<T>): Promise<T> {
  return work.catch((err: unknown) => {
    if (err instanceof ApiError || err instanceof Cancelled || err instanceof TypeError || err instanceof RangeError) throw err;
    if (err instanceof ReplyError || (err instanceof Error && err.message === COMMAND_TIMED_OUT)) noteRefusal(err as Error);
    throw stateUnavailable();
  });
}
