// Reading a JSON request body and writing JSON answers in the wire format,
// shared by the gateway and the local engine.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, bodyTooLarge, invalidJson, unsupportedContentType } from './errors.js';

export async function readJsonBody(req: IncomingMessage, limitBytes: number): Promise<unknown> {
  const type = req.headers['content-type'];
  if (type !== undefined && !/^application\/(.+\+)?json\b/i.test(type)) throw unsupportedContentType(type);
  const declared = Number(req.headers['content-length']);
  if (declared > limitBytes) throw bodyTooLarge(limitBytes);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limitBytes) throw bodyTooLarge(limitBytes);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks, size).toString('utf8');
  if (text.trim() === '') throw invalidJson('the body is empty');
  try {
    return JSON.parse(text);
  } catch (err) {
    throw invalidJson((err as Error).message);
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function sendError(res: ServerResponse, err: ApiError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, err.status, err.toBody(), err.headers);
}

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
} as const;
