// Reading a multipart/form-data body (RFC 7578), as OpenAI's clients upload
// files: text fields and one file part, each with its name and, for a file,
// its filename. The body is read whole up to a limit, then split on its
// boundary; a body that is not well formed is a 400.
//
// The body is read where its chunks lie, not joined: joined, a file of 32 MB
// held the main thread 100 to 130 ms, every other request on the replica
// waiting (test/batches/large-lines.test.ts). A part's bytes are the pieces
// of the chunks it spans.
import type { IncomingMessage } from 'node:http';
import { ApiError, invalidParameter } from './errors.js';
import { readBody, type BodyAllowance } from './http-io.js';

export interface FormPart {
  name: string;
  filename: string | null;
  /** Its bytes, in pieces, in order, and how many. */
  data: Buffer[];
  size: number;
}

/**
 * The most parts a form may hold: OpenAI's uploads have two or three. A body of 32 MiB of empty parts holds about
 * three million, each its own headers to read.
 */
export const MAX_FORM_PARTS = 16;
/** The most bytes of a part's headers: a disposition and a type take a few hundred. */
const MAX_HEADERS_BYTES = 8 * 1024;

const notMultipart = () => new ApiError(400, 'invalid_request_error', 'Upload the file as multipart/form-data, with the fields `purpose` and `file`.', 'invalid_content_type');

/** The disposition parameter `name` of a part's headers (quoted, as clients send it). */
function dispositionParam(headers: string, name: string): string | null {
  const m = new RegExp(`;\\s*${name}="((?:[^"\\\\]|\\\\.)*)"`, 'i').exec(headers);
  return m ? m[1].replace(/\\(.)/g, '$1') : null;
}

/** A body's bytes as the chunks they came in, read in place. */
class ChunkedBytes {
  /** Where each chunk starts in the body. */
  private readonly starts: number[] = [];
  readonly size: number;

  constructor(private readonly chunks: Buffer[]) {
    let at = 0;
    for (const chunk of chunks) {
      this.starts.push(at);
      at += chunk.length;
    }
    this.size = at;
  }

  /** The chunk that holds byte `at` (the last one, past the end). */
  private chunkAt(at: number): number {
    let low = 0;
    let high = this.chunks.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if (this.starts[mid] <= at) low = mid;
      else high = mid - 1;
    }
    return low;
  }

  /** Where `needle` first starts at or after `from`, or -1. */
  indexOf(needle: Buffer, from: number): number {
    for (let i = this.chunkAt(from); i < this.chunks.length; i++) {
      const start = this.starts[i];
      const end = start + this.chunks[i].length;
      const within = this.chunks[i].indexOf(needle, Math.max(0, from - start));
      if (within >= 0) return start + within;
      // One that starts in this chunk's last bytes and ends in the next chunks.
      const seamFrom = Math.max(from, end - needle.length + 1);
      const seam = this.bytes(seamFrom, Math.min(this.size, end + needle.length - 1)).indexOf(needle);
      if (seam >= 0) return seamFrom + seam;
    }
    return -1;
  }

  /** Bytes `from` to `to`, as pieces of the chunks, not copied. */
  pieces(from: number, to: number): Buffer[] {
    const pieces: Buffer[] = [];
    for (let i = this.chunkAt(from); i < this.chunks.length && this.starts[i] < to; i++) {
      const start = this.starts[i];
      pieces.push(this.chunks[i].subarray(Math.max(0, from - start), to - start));
    }
    return pieces;
  }

  /** Bytes `from` to `to`, joined: for the few bytes of a form's headers and delimiters. */
  bytes(from: number, to: number): Buffer {
    return from >= to ? Buffer.alloc(0) : Buffer.concat(this.pieces(from, to));
  }
}

/** The form's parts, in order; its bytes counted by `allowance` as they arrive. */
export async function readMultipart(req: IncomingMessage, limitBytes: number, allowance?: BodyAllowance): Promise<FormPart[]> {
  const type = req.headers['content-type'] ?? '';
  const boundary = /^multipart\/form-data\s*;.*\bboundary=(?:"([^"]+)"|([^\s;]+))/i.exec(type);
  if (!boundary) throw notMultipart();
  const body = new ChunkedBytes(await readBody(req, limitBytes, (chunks) => chunks, allowance));
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  const nextDelimiter = Buffer.concat([Buffer.from('\r\n'), delimiter]);
  const headersEnd = Buffer.from('\r\n\r\n');
  const parts: FormPart[] = [];
  let at = body.indexOf(delimiter, 0);
  if (at < 0) throw invalidParameter(null, 'The multipart body holds no parts.');
  for (let count = 0; ; count++) {
    at += delimiter.length;
    if (body.bytes(at, at + 2).toString() === '--') return parts;
    if (count === MAX_FORM_PARTS) throw invalidParameter(null, `A multipart body may hold at most ${MAX_FORM_PARTS} parts.`);
    const dataStart = body.indexOf(headersEnd, at);
    const next = dataStart < 0 ? -1 : body.indexOf(nextDelimiter, dataStart);
    if (next < 0) throw invalidParameter(null, 'The multipart body ends before its closing boundary.');
    if (dataStart - at > MAX_HEADERS_BYTES) throw invalidParameter(null, `A part's headers may be at most ${MAX_HEADERS_BYTES} bytes.`);
    const headers = body.bytes(at, dataStart).toString('utf8');
    const name = dispositionParam(headers, 'name');
    const from = dataStart + headersEnd.length;
    if (name !== null) parts.push({ name, filename: dispositionParam(headers, 'filename'), data: body.pieces(from, next), size: next - from });
    at = next + 2;
  }
}
