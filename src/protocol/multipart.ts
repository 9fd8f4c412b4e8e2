// Reading a multipart/form-data body (RFC 7578), as OpenAI's clients upload
// files: text fields and one file part, each with its name and, for a file,
// its filename. The body is read whole up to a limit, then split on its
// boundary; a body that is not well formed is a 400.
import type { IncomingMessage } from 'node:http';
import { ApiError, invalidParameter } from './errors.js';
import { readBody, type BodyAllowance } from './http-io.js';

export interface FormPart {
  name: string;
  filename: string | null;
  data: Buffer;
}

const notMultipart = () => new ApiError(400, 'invalid_request_error', 'Upload the file as multipart/form-data, with the fields `purpose` and `file`.', 'invalid_content_type');

/** The disposition parameter `name` of a part's headers (quoted, as clients send it). */
function dispositionParam(headers: string, name: string): string | null {
  const m = new RegExp(`;\\s*${name}="((?:[^"\\\\]|\\\\.)*)"`, 'i').exec(headers);
  return m ? m[1].replace(/\\(.)/g, '$1') : null;
}

/** The form's parts, in order; its bytes counted by `allowance` as they arrive. */
export async function readMultipart(req: IncomingMessage, limitBytes: number, allowance?: BodyAllowance): Promise<FormPart[]> {
  const type = req.headers['content-type'] ?? '';
  const boundary = /^multipart\/form-data\s*;.*\bboundary=(?:"([^"]+)"|([^\s;]+))/i.exec(type);
  if (!boundary) throw notMultipart();
  const body = await readBody(req, limitBytes, (chunks, size) => Buffer.concat(chunks, size), allowance);
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  const parts: FormPart[] = [];
  let at = body.indexOf(delimiter);
  if (at < 0) throw invalidParameter(null, 'The multipart body holds no parts.');
  for (;;) {
    at += delimiter.length;
    if (body.subarray(at, at + 2).toString() === '--') return parts;
    const headersEnd = body.indexOf('\r\n\r\n', at);
    const next = body.indexOf(Buffer.concat([Buffer.from('\r\n'), delimiter]), headersEnd);
    if (headersEnd < 0 || next < 0) throw invalidParameter(null, 'The multipart body ends before its closing boundary.');
    const headers = body.subarray(at, headersEnd).toString('utf8');
    const name = dispositionParam(headers, 'name');
    if (name !== null) parts.push({ name, filename: dispositionParam(headers, 'filename'), data: body.subarray(headersEnd + 4, next) });
    at = next + 2;
  }
}
