// Ids for requests and their holds: 128 random bits as 22 URL-safe
// characters. A streamed reply repeats its id in every chunk, where a UUID's
// 36 characters would be a tenth of what Parley writes per chunk. The bits
// come from a pool filled POOL_IDS ids at a time, as Node's randomUUID fills
// its own: randomBytes asks OpenSSL (and the kernel) at every id, and a UUID
// takes a hex round trip to become 22 characters. CPU profiles of whole
// replies at 32 connections put a request's two ids at 15.2 µs with
// randomBytes, 5.5 µs through randomUUID and 1.8 µs from the pool (`node
// bench/cpu-profile.mjs HEAD` against 985563a, then `... 4e458b7`,
// 2026-11-28); in a loop the pool takes 0.14 µs an id, randomBytes 3.0 and
// the UUID 1.1. With the key's HMAC remembered (accounts/key-authenticator.ts),
// behind a 20 ms first byte at 16 connections, `node bench/revision-ab.mjs
// 985563a whole 16 6 6 20` gave 509 against 564 µs of main-thread CPU a
// request (1.11 times the requests/s).
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
