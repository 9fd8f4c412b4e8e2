// Ids for requests and their holds: 128 random bits as 22 URL-safe
// characters. A streamed reply repeats its id in every chunk, where a UUID's
// 36 characters would be a tenth of what Parley writes per chunk. The bits come
// from a pool filled POOL_IDS ids at a time: randomBytes at each id asks
// OpenSSL (and makes a getpid system call) every time, and a UUID drawn from
// Node's own entropy cache costs a hex round trip to become 22 characters.
// Against the UUID's round trip, `node bench/fast-paths.mjs pooled-ids 5 6 1`
// gave 1.15 times the light-load (one connection) whole requests/s, and 541
// against 615 µs of main-thread CPU a request (2026-11-27; rounds 1.15 0.96
// 1.06 1.19 1.17 1.07; 1.04 on 2026-11-26).
import { randomFillSync } from 'node:crypto';

const ID_BYTES = 16;
const POOL_IDS = 256;
const pool = Buffer.alloc(ID_BYTES * POOL_IDS);
let taken = pool.length;

export function randomId(): string {
  if (taken === pool.length) {
    randomFillSync(pool);
    taken = 0;
  }
  taken += ID_BYTES;
  return pool.toString('base64url', taken - ID_BYTES, taken);
}
