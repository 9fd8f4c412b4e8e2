// Ids for requests and their holds: 128 random bits as 22 URL-safe
// characters. A streamed reply repeats its id in every chunk, and a UUID's 36
// characters were a tenth of what Parley wrote per chunk.
import { randomFillSync } from 'node:crypto';

const ID_BYTES = 16;
// Random bytes are drawn for many ids at once: one call into the system's generator per 256 requests.
const POOL_BYTES = 256 * ID_BYTES;
let pool = Buffer.alloc(0);
let used = 0;

export function randomId(): string {
  if (used === pool.length) {
    pool = randomFillSync(Buffer.allocUnsafe(POOL_BYTES));
    used = 0;
  }
  used += ID_BYTES;
  return pool.toString('base64url', used - ID_BYTES, used);
}
