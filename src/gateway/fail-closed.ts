// Redis work done on a request's behalf fails closed: a Redis that cannot be
// reached means no answer (503), never a free reply.
import { ApiError, stateUnavailable } from '../protocol/errors.js';

/** Awaits Redis work: an ApiError raised meanwhile passes through, and any failure to reach Redis becomes the 503 the request is answered with. */
export async function failClosed<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw err instanceof ApiError ? err : stateUnavailable();
  }
}
