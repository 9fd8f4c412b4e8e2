// POST /v1/messages (Anthropic's Messages API, what Claude Code and the
// Anthropic SDKs call) and POST /v1/messages/count_tokens, on the models that
// serve chat: the request mapped onto chat's, the reply rendered as
// Anthropic's, through the same stages as every API.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import { messagesToChat, parseCountTokensRequest, parseMessagesRequest } from '../protocol/messages-request.js';
import { MessageEventRenderer, renderMessage } from '../protocol/messages-response.js';
import { ApiError } from '../protocol/errors.js';
import { sendJson } from '../protocol/http-io.js';
import { upstreamPromptCount } from '../upstream/client.js';
import { chat } from './chat-completions.js';
import { chatMapped } from './chat-mapped.js';
import type { GatewayContext } from './context.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import { countInWindow, openExchange, servingModel } from './exchange.js';
import { estimatedTokens, handleApiRequest } from './api-path.js';

export const messages = chatMapped({
  name: 'messages',
  idPrefix: 'msg_',
  parse: parseMessagesRequest,
  toChat: messagesToChat,
  renderWhole: renderMessage,
  renderer: (identity, source, counted) => new MessageEventRenderer(identity, counted, source.stop_sequences),
});

export function handleMessages(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  return handleApiRequest(messages, req, res, ctx, span, record);
}

/**
 * The prompt's tokens, not charged: the model's own tokenizer where it has
 * one, else the count of an upstream that can count (vLLM's /tokenize), else
 * an estimate from the text (about 3 bytes a token).
 */
export async function countMessageTokens(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span): Promise<void> {
  const { caller, table, body } = await openExchange(req, res, ctx, false);
  const source = parseCountTokensRequest(body);
  if (source instanceof ApiError) throw source;
  const request = messagesToChat(source);
  if (request instanceof ApiError) throw request;
  const model = servingModel(table, request.model, 'chat', span, caller);
  // Counting is work done for the caller: it is one of the account's requests, and waits for its window's room.
  await countInWindow(ctx, caller, table);
  const counted = await chat.promptTokens(model, request);
  if (counted.exact) return sendJson(res, 200, { input_tokens: counted.tokens[0] });
  const counter = model.endpoints.find((e) => e.dialect.promptCount && ctx.router.state(e).breaker.isAvailable());
  const upstreamCount = counter && (await upstreamPromptCount(counter, request.messages));
  sendJson(res, 200, { input_tokens: upstreamCount ?? estimatedTokens(counted.tokens[0]) });
}
