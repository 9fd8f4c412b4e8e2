// POST /v1/responses (OpenAI's Responses API, what Codex, the Agents SDK and
// the AI SDK call) on the models that serve chat: stateless, the request
// mapped onto chat's, the reply rendered as a response, through the same
// stages as every API. A stored response is never there to read.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import { ApiError } from '../protocol/errors.js';
import { KEEPS_NO_STATE, parseResponsesRequest, responsesToChat } from '../protocol/responses-request.js';
import { renderResponse, ResponseEventRenderer } from '../protocol/responses-response.js';
import { chatMapped } from './chat-mapped.js';
import type { GatewayContext } from './context.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import { authenticate } from './exchange.js';
import { handleApiRequest } from './api-path.js';

export const responses = chatMapped({
  name: 'responses',
  idPrefix: 'resp_',
  promptField: 'input',
  parse: parseResponsesRequest,
  toChat: responsesToChat,
  renderWhole: renderResponse,
  renderer: (identity, source) => new ResponseEventRenderer(identity, source),
});

export function handleResponses(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  return handleApiRequest(responses, req, res, ctx, span, record);
}

/** GET or DELETE /v1/responses/{id}: nothing was stored, so there is nothing to read or delete. */
export async function storedResponse(req: IncomingMessage, ctx: GatewayContext, id: string): Promise<never> {
  await authenticate(req, ctx);
  throw new ApiError(404, 'invalid_request_error', `No response with id '${id}': ${KEEPS_NO_STATE}.`, 'response_not_found', 'response_id');
}
