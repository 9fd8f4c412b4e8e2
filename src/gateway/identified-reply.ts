// Every reply names its request's id in its headers, errors included, so a
// client can quote it and find its usage event. The id joins the headers as
// they are written, not set on the reply beforehand: one header set with
// setHeader sends every other header of the reply through Node's slower
// progressive path at writeHead (each one validated and stored again). In
// `node bench/cpu-profile.mjs 0327bf4~ whole 32 8 4` (2026-11-29) Node's
// header functions took 3.3 µs less a whole request this way; with three
// smaller changes of that commit, `node bench/revision-ab.mjs 0327bf4~
// whole 32 6 8` gave 1.07 times the requests/s, 190 against 201 µs of
// main-thread CPU a request.
import { ServerResponse, type IncomingMessage, type OutgoingHttpHeader, type OutgoingHttpHeaders } from 'node:http';

type Headers = OutgoingHttpHeaders | OutgoingHttpHeader[];

function withIds(ids: Record<string, string>, headers: Headers | undefined): Headers {
  if (headers === undefined) return ids;
  if (Array.isArray(headers)) return [...Object.entries(ids).flat(), ...headers];
  return Object.assign({}, ids, headers);
}

export class IdentifiedReply<Request extends IncomingMessage = IncomingMessage> extends ServerResponse<Request> {
  /** The headers that name the request's id: `x-request-id`, and `request-id` for Anthropic's clients. */
  ids: Record<string, string> = {};

  override writeHead(statusCode: number, reason?: string | Headers, headers?: Headers): this {
    if (typeof reason === 'string') return super.writeHead(statusCode, reason, withIds(this.ids, headers));
    return super.writeHead(statusCode, withIds(this.ids, reason));
  }
}
