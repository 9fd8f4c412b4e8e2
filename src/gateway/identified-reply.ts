// Every reply names its request's id in its headers, errors included, so a
// client can quote it and find its usage event. The id joins the headers as
// they are written, not set on the reply beforehand: one header set with
// setHeader sends every other header of the reply through Node's slower
// progressive path at writeHead (each one validated and stored again).
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
