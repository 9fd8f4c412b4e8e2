// The client APIs whose requests map onto a chat request (Anthropic's
// Messages, OpenAI's Responses): each brings its schema, its mapping and its
// renderers; chat's descriptor does everything between (counting, routing,
// the upstream's dialect, reading its reply).
import type { ClientApi } from '../config.js';
import type { ChatCompletionRequest } from '../protocol/chat-request.js';
import type { Completion, ReplyIdentity, ReplyRenderer } from '../protocol/chat-response.js';
import { ApiError } from '../protocol/errors.js';
import { chat, chatPromptTokens } from './chat-completions.js';
import type { ApiDescriptor } from './api-path.js';

/** A request of such an API: as the client sent it, and as chat carries it. */
export interface ChatMapped<S> {
  source: S;
  chat: ChatCompletionRequest;
}

export interface ChatMappedApi<S> {
  name: ClientApi;
  /** The field of the API's request that holds the prompt, where it is not `messages`. */
  promptField?: string;
  idPrefix: string;
  parse(body: unknown): S | ApiError;
  toChat(source: S): ChatCompletionRequest | ApiError;
  renderWhole(identity: ReplyIdentity, completion: Completion, source: S): unknown;
  renderer(identity: ReplyIdentity, source: S, countedPromptTokens: number): ReplyRenderer;
}

export function chatMapped<S>(api: ChatMappedApi<S>): ApiDescriptor<ChatMapped<S>> {
  return {
    name: api.name,
    serves: 'chat',
    idPrefix: api.idPrefix,
    promptField: api.promptField,
    parse(body) {
      const source = api.parse(body);
      if (source instanceof ApiError) return source;
      const mapped = api.toChat(source);
      return mapped instanceof ApiError ? mapped : { source, chat: mapped };
    },
    common: (r) => ({ ...chat.common(r.chat), fitToWindow: true }),
    promptTokens: (model, r) => chatPromptTokens(model, r.chat, api.promptField),
    affinityKey: (r) => chat.affinityKey(r.chat),
    cacheHint: (r) => chat.cacheHint!(r.chat),
    withMaxTokens: (r, maxTokens) => ({ ...r, chat: chat.withMaxTokens(r.chat, maxTokens) }),
    passThrough: chat.passThrough,
    upstreamRequest: (endpoint, model, r, passThrough) => chat.upstreamRequest(endpoint, model, r.chat, passThrough),
    readWhole: (endpoint, body, r) => chat.readWhole(endpoint, body, r.chat),
    mergeWhole: chat.mergeWhole,
    renderWhole: (identity, completion, r) => api.renderWhole(identity, completion, r.source),
    streaming: { read: chat.streaming!.read, renderer: (identity, r, counted) => api.renderer(identity, r.source, counted) },
  };
}
