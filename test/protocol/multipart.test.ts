// The multipart reader, on bodies as clients write them: httpx (the Python
// clients) with a hex boundary, a browser's FormData with a quoted one, a
// filename holding an escaped quote; a body that comes a few bytes at a time;
// and bodies cut short, without a boundary, or with too many parts.
import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { MAX_FORM_PARTS, readMultipart, type FormPart } from '../../src/protocol/multipart.js';
import { ApiError } from '../../src/protocol/errors.js';

/**
 * Posts `body` with `contentType` to a server that reads it as multipart, whole or `bytesAtOnce` at a time (each
 * written after a pause, so that the server reads it in as many chunks); resolves to the parts or the error.
 */
async function read(contentType: string, body: string, limit = 1024 * 1024, bytesAtOnce = Infinity) {
  let handle: (req: IncomingMessage) => void = () => {};
  const outcome = new Promise<unknown>((resolve) => (handle = (req) => readMultipart(req, limit).then(resolve, resolve)));
  const server = createServer((req, res) => {
    handle(req);
    void outcome.then(() => res.end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const sent = request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { method: 'POST', headers: { 'content-type': contentType } });
  sent.on('error', () => {});
  const bytes = Buffer.from(body);
  for (let at = 0; at < bytes.length; at += bytesAtOnce) {
    sent.write(bytes.subarray(at, at + bytesAtOnce));
    if (bytesAtOnce < bytes.length) await sleep(2);
  }
  sent.end();
  const parts = await outcome;
  server.close();
  return parts;
}

const text = (part: FormPart) => Buffer.concat(part.data).toString();

const httpxBody = (boundary: string, data: string) =>
  `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="requests.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n${data}\r\n--${boundary}--\r\n`;

describe('reading a multipart form', () => {
  it('reads the fields and the file as the Python clients send them, the file byte for byte', async () => {
    const data = '{"custom_id":"a"}\r\n{"custom_id":"b"}\n';
    const parts = (await read('multipart/form-data; boundary=0f3c9a8e2b1d4c5fa7e6d5c4b3a29180', httpxBody('0f3c9a8e2b1d4c5fa7e6d5c4b3a29180', data))) as FormPart[];
    expect(parts.map((p) => [p.name, p.filename])).toEqual([['purpose', null], ['file', 'requests.jsonl']]);
    expect(text(parts[0])).toBe('batch');
    expect(text(parts[1])).toBe(data);
    expect(parts[1].size).toBe(Buffer.byteLength(data));
  });

  it('reads a body that came a few bytes at a time, its boundaries split between the chunks, where they lie', async () => {
    const data = `${'{"custom_id":"a"}\n'.repeat(4)}é\n`;
    const boundary = '0f3c9a8e2b1d4c5fa7e6d5c4b3a29180';
    const parts = (await read(`multipart/form-data; boundary=${boundary}`, httpxBody(boundary, data), 1024 * 1024, 5)) as FormPart[];
    expect(parts.map((p) => [p.name, p.filename])).toEqual([['purpose', null], ['file', 'requests.jsonl']]);
    expect(text(parts[0])).toBe('batch');
    expect(text(parts[1])).toBe(data);
    expect(parts[1].size).toBe(Buffer.byteLength(data));
    // In pieces of the chunks it came in, not joined.
    expect(parts[1].data.length).toBeGreaterThan(2);
  });

  it('takes a quoted boundary and a filename with an escaped quote', async () => {
    const body = `--a b\r\nContent-Disposition: form-data; name="file"; filename="my \\"big\\" file.jsonl"\r\n\r\nx\r\n--a b--\r\n`;
    const [part] = (await read('multipart/form-data; boundary="a b"', body)) as { filename: string }[];
    expect(part.filename).toBe('my "big" file.jsonl');
  });

  it('refuses a body cut short, one with no boundary, and one past its limit, with a 4xx', async () => {
    const cut = await read('multipart/form-data; boundary=xyz', '--xyz\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\nno end');
    expect(cut).toBeInstanceOf(ApiError);
    expect((cut as ApiError).status).toBe(400);
    expect(((await read('multipart/form-data', 'x')) as ApiError).status).toBe(400);
    expect(((await read('application/json', '{}')) as ApiError).status).toBe(400);
    expect(((await read('multipart/form-data; boundary=xyz', httpxBody('xyz', 'a'.repeat(4096)), 1024)) as ApiError).status).toBe(413);
  });

  it(`refuses a body of more than ${MAX_FORM_PARTS} parts, or a part whose headers run past 8 KiB, with a 400`, async () => {
    const form = (count: number) => `${'--xyz\r\nContent-Disposition: form-data; name="f"\r\n\r\nv\r\n'.repeat(count)}--xyz--\r\n`;
    expect(((await read('multipart/form-data; boundary=xyz', form(MAX_FORM_PARTS))) as FormPart[]).length).toBe(MAX_FORM_PARTS);
    const many = (await read('multipart/form-data; boundary=xyz', form(MAX_FORM_PARTS + 1))) as ApiError;
    expect(many).toMatchObject({ status: 400, message: expect.stringContaining(`at most ${MAX_FORM_PARTS} parts`) });
    const endless = (await read('multipart/form-data; boundary=xyz', `--xyz\r\nX-Long: ${'h'.repeat(20_000)}\r\n\r\nv\r\n--xyz--\r\n`)) as ApiError;
    expect(endless).toMatchObject({ status: 400, message: expect.stringContaining("headers may be at most") });
  });
});
