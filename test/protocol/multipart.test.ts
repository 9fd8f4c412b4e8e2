// The multipart reader, on bodies as clients write them: httpx (the Python
// clients) with a hex boundary, a browser's FormData with a quoted one, a
// filename holding an escaped quote; and bodies cut short or without a boundary.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { readMultipart } from '../../src/protocol/multipart.js';
import { ApiError } from '../../src/protocol/errors.js';

/** Posts `body` with `contentType` to a server that reads it as multipart; resolves to the parts or the error. */
async function read(contentType: string, body: string, limit = 1024 * 1024) {
  let handle: (req: IncomingMessage) => void = () => {};
  const outcome = new Promise<unknown>((resolve) => (handle = (req) => readMultipart(req, limit).then(resolve, resolve)));
  const server = createServer((req, res) => {
    handle(req);
    void outcome.then(() => res.end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { method: 'POST', headers: { 'content-type': contentType }, body }).catch(() => {});
  server.close();
  return outcome;
}

const httpxBody = (boundary: string, data: string) =>
  `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="requests.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n${data}\r\n--${boundary}--\r\n`;

describe('reading a multipart form', () => {
  it('reads the fields and the file as the Python clients send them, the file byte for byte', async () => {
    const data = '{"custom_id":"a"}\r\n{"custom_id":"b"}\n';
    const parts = (await read('multipart/form-data; boundary=0f3c9a8e2b1d4c5fa7e6d5c4b3a29180', httpxBody('0f3c9a8e2b1d4c5fa7e6d5c4b3a29180', data))) as { name: string; filename: string | null; data: Buffer }[];
    expect(parts.map((p) => [p.name, p.filename])).toEqual([['purpose', null], ['file', 'requests.jsonl']]);
    expect(parts[0].data.toString()).toBe('batch');
    expect(parts[1].data.toString()).toBe(data);
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
});
