// Ids for requests and their holds: 128 random bits as 22 URL-safe
// characters. A streamed reply repeats its id in every chunk, where a UUID's
// 36 characters would be a tenth of what Parley writes per chunk.
import { randomBytes } from 'node:crypto';

const ID_BYTES = 16;

export const randomId = (): string => randomBytes(ID_BYTES).toString('base64url');
