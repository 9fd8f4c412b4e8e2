// POST /v1/chat/completions: what chat brings to the shared generation path
// (gateway/api-path.ts): OpenAI's chat schema, a prompt of messages, and
// `chat.completion` replies and chunks.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import { messageText, parseChatCompletionRequest, passThroughFields, requestedMaxTokens, type ChatCompletionRequest } from '../protocol/chat-request.js';
import { ChunkRenderer, renderCompletion } from '../protocol/chat-response.js';
import { promptTooLong } from '../protocol/errors.js';
import { conversationKey } from '../routing/affinity-key.js';
import { readStream, readWhole } from '../upstream/client.js';
import { mergeCompletions } from '../upstream/fan-out.js';
import type { GatewayContext } from './context.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import type { RoutedModel } from '../routing/routing-table.js';
import { handleApiRequest, perChoiceBodies, type ApiDescriptor, type PromptCount } from './api-path.js';

// Without a tokenizer, a prompt is bounded by its UTF-8 bytes (a byte-level
// tokenizer never makes more tokens than bytes) plus the template's framing.
const FRAMING_TOKENS_PER_MESSAGE = 8;

/**
 * The largest prompt counted exactly, in UTF-8 bytes of text: counting runs
 * on the counter's own threads (engine/prompt-counter.ts), at 1.2 to 3 MB/s
 * on this project's 2-core VM, so this keeps one count under about 100 ms of
 * the counts queued behind it. A larger prompt is bounded by its bytes, as
 * without a tokenizer (held for in full, its window left to the upstream),
 * unless even its fewest possible tokens pass the window, which refuses it
 * at once.
 */
export const EXACT_COUNT_MAX_BYTES = 128 * 1024;

/**
 * A chat prompt's tokens, as ApiDescriptor's promptTokens; a prompt sure to overflow is refused naming
 * `promptField`, the field the client sent it in (an API mapped to chat names its own).
 */
export function chatPromptTokens(model: RoutedModel, request: ChatCompletionRequest, promptField?: string): PromptCount | Promise<PromptCount> {
  const texts = request.messages.map(messageText);
  let bytes = 0;
  for (const text of texts) bytes += Buffer.byteLength(text);
  const bound = { tokens: [bytes + FRAMING_TOKENS_PER_MESSAGE * (request.messages.length + 1)], exact: false };
  const counter = model.promptCounter;
  if (counter) {
    const fewest = Math.ceil(bytes / counter.maxTokenBytes);
    if (fewest >= model.config.contextWindow) throw promptTooLong(fewest, model.config.contextWindow, 'at least', promptField);
    if (bytes <= EXACT_COUNT_MAX_BYTES) {
      const counted = counter.count(request.messages.map((m, i) => ({ role: m.role, content: texts[i] })), bytes);
      return counted.then((tokens) => (tokens === undefined ? bound : { tokens: [tokens], exact: true }));
    }
  }
  return bound;
}

export const chat: ApiDescriptor<ChatCompletionRequest> = {
  name: 'chat',
  serves: 'chat',
  idPrefix: 'chatcmpl-',
  parse: parseChatCompletionRequest,
  common: (r) => ({
    model: r.model,
    n: r.n ?? 1,
    stream: r.stream === true,
    maxTokens: requestedMaxTokens(r),
    user: r.user ?? undefined,
    serviceTier: r.service_tier,
  }),
  promptTokens: (model, request) => chatPromptTokens(model, request),
  affinityKey: (r) => conversationKey(r.messages),
  cacheHint: (r) => r.prompt_cache_key,
  withMaxTokens: (r, maxTokens) => ({ ...r, max_tokens: maxTokens, max_completion_tokens: maxTokens }),
  passThrough: (body, model) => passThroughFields(body, model.config.passThrough),
  upstreamRequest(endpoint, model, request, passThrough) {
    const body = endpoint.dialect.chat.requestBody(request, {
      upstreamModel: endpoint.upstreamModel,
      supportsTools: model.config.supports.tools,
      supportsJsonOutput: model.config.supports.jsonOutput,
      passThrough,
    });
    return { path: '/chat/completions', bodies: perChoiceBodies(endpoint, body, request.n ?? 1, request.seed) };
  },
  readWhole: (endpoint, body) => readWhole(body, (json) => endpoint.dialect.chat.whole(json)),
  mergeWhole: mergeCompletions,
  renderWhole: renderCompletion,
  streaming: { read: (endpoint, body) => readStream(endpoint.dialect.chat, body), renderer: (identity, r) => new ChunkRenderer(identity, r.stream_options?.include_usage === true) },
};

export function handleChatCompletion(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  return handleApiRequest(chat, req, res, ctx, span, record);
}
