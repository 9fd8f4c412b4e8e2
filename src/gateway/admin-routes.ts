// Operator views. They show upstream URLs and load, so they are not for API
// keys: a request needs `Authorization: Bearer $PARLEY_ADMIN_TOKEN`, or, when
// no admin token is set, must come from this machine.
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError } from '../protocol/errors.js';
import { sendJson } from '../protocol/http-io.js';
import type { GatewayContext } from './context.js';

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

function allowed(req: IncomingMessage): boolean {
  const token = process.env.PARLEY_ADMIN_TOKEN;
  if (!token) return LOOPBACK.has(req.socket.remoteAddress ?? '');
  const given = Buffer.from(/^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '');
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export function getEndpoints(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext): void {
  if (!allowed(req)) throw new ApiError(403, 'invalid_request_error', 'Operator views need Authorization: Bearer <PARLEY_ADMIN_TOKEN>.', 'forbidden');
  sendJson(res, 200, { object: 'list', data: ctx.router.snapshot() });
}
