// Ids for requests and their holds: a random UUID's 122 random bits as 22
// URL-safe characters. A streamed reply repeats its id in every chunk, and a
// UUID's 36 characters were a tenth of what Parley wrote per chunk. Node
// draws UUIDs from entropy it gathers 128 at a time, where randomBytes asks
// OpenSSL at each call (and makes a getpid system call each time): in a
// light-load profile randomBytes took 3% of a request's CPU. Against it,
// `node bench/fast-paths.mjs uuid-ids` gave 1.21 and 0.99 times the whole
// requests/s at 32 connections in two runs (2026-11-26): a gain too small
// for this machine's noise to settle, for a change of the same size.
import { randomUUID } from 'node:crypto';

export const randomId = (): string => Buffer.from(randomUUID().replaceAll('-', ''), 'hex').toString('base64url');
