// Ids for requests and their holds: 128 random bits as 22 URL-safe
// characters. A streamed reply repeats its id in every chunk, and a UUID's 36
// characters were a tenth of what Parley wrote per chunk.
import { randomBytes } from 'node:crypto';

export const randomId = (): string => randomBytes(16).toString('base64url');
