// Redis work done on a request's behalf fails closed: a Redis that cannot be
// reached means no answer (503), never a free reply.
import { ApiError, Cancelled, stateUnavailable } from '../protocol/errors.js';

/**
 * Awaits Redis work: any failure to reach Redis becomes the 503 the request is answered with. An ApiError raised
 * meanwhile passes through, and so does a TypeError or RangeError: Parley's own mistake, which no outage message
 * may hide (the server answers it as a 500 and logs it).
 */
export function failClosed<T>(work: Promise<T>): Promise<T> {
  return work.catch((err: unknown) => {
    throw err instanceof ApiError || err instanceof Cancelled || err instanceof TypeError || err instanceof RangeError ? err : stateUnavailable();
  });
}
