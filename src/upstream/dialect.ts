// The narrow interface every upstream kind implements, one mapping per client
// API (its request body, its whole reply, its streamed events) and the
// reading of its error answers, and the OpenAI-compatible dialect they are
// all made from. A dialect file names its upstream's quirks; nothing outside
// upstream/ knows them.
import type { ServiceTier } from '../protocol/service-tier.js';
import type { ChatCompletionRequest, ChatMessage } from '../protocol/chat-request.js';
import type { CompletionRequest } from '../protocol/completions.js';
import type { EmbeddingsReply, EmbeddingsRequest } from '../protocol/embeddings.js';
import type { Completion, StreamEvent } from '../protocol/chat-response.js';
import type { ApiError } from '../protocol/errors.js';
import type { EngineLoadSource } from './engine-load.js';
import { embeddingsInPlace, type EmbeddingsInPlace } from './embeddings-in-place.js';
import { chatEvent, chatReply, embeddingsReply, errorAnswer, textEvent, textReply, type ReplyQuirks } from './openai-replies.js';
import { chatBody, embeddingsBody, textBody, type RequestQuirks, type UpstreamTarget } from './openai-requests.js';
import { quickEvents, type ChunkFraming } from './quick-events.js';
import { SseParser, type SseEvent } from './sse-parser.js';

export interface Dialect {
  /** Whether one upstream call can return `n` choices; if not, the gateway fans out. */
  readonly multipleChoices: boolean;
  /** Where this upstream counts a chat prompt's tokens as its template makes them, if it can. */
  readonly promptCount?: PromptCount;
  /** The request priority this upstream schedules a tier's requests by, where it takes one (an endpoint opts in). */
  readonly priorityOf?: (tier: ServiceTier) => number;
  /** Where this engine reports its own queue and KV-cache use; absent for an API that does not (a hosted one). */
  readonly engineLoad?: EngineLoadSource;
  /** Whether it keeps the prefix caches of requests with different `cache_salt`s apart (accounts/cache-salt.ts). */
  readonly saltsPrefixCache: boolean;
  readonly chat: GenerationMapping<ChatCompletionRequest>;
  /** Text completions, read as chat's are: each choice's text as its message's content. */
  readonly text: GenerationMapping<CompletionRequest>;
  readonly embeddings: EmbeddingsMapping;
  /** What an upstream's non-2xx answer means to the caller. */
  error(status: number, bodyText: string): ApiError;
}

/** One generating API on this upstream. Readers throw UpstreamBrokeOff on what is not a reply or is an error event. */
export interface GenerationMapping<Request> {
  /** The JSON body sent upstream. Streaming calls always ask for usage, so Parley can meter. */
  requestBody(req: Request, target: UpstreamTarget): Record<string, unknown>;
  whole(body: unknown): Completion;
  /** A parser for one streamed reply's server-sent events; the events its quick path reads come out normalized. */
  streamParser(): SseParser;
  streamEvent(event: SseEvent): StreamEvent;
}

export interface EmbeddingsMapping {
  requestBody(req: EmbeddingsRequest, upstreamModel: string): Record<string, unknown>;
  /** Throws UpstreamBrokeOff when the reply is not one. */
  whole(body: unknown): EmbeddingsReply;
  /** The reply passed on with its vectors unread, where its shape allows; undefined sends it to `whole`. */
  inPlace(body: Buffer, model: string, encoding: 'float' | 'base64'): EmbeddingsInPlace | undefined;
}

/** An upstream's own count of a chat prompt: where to ask, what to send, where the count is in the answer. */
export interface PromptCount {
  url(baseUrl: string): string;
  body(messages: ChatMessage[], upstreamModel: string): Record<string, unknown>;
  read(answer: Record<string, any>): unknown;
}

/** How an upstream differs from OpenAI's API; each field is absent where it does not. */
export interface DialectQuirks extends RequestQuirks, ReplyQuirks {
  promptCount?: PromptCount;
  priorityOf?: (tier: ServiceTier) => number;
  engineLoad?: EngineLoadSource;
  saltsPrefixCache?: boolean;
  multipleChoices?: boolean;
  /** The fields this upstream writes around every streamed chat chunk that say nothing; absent where its chunks are framed otherwise (no quick path). */
  chunkFraming?: ChunkFraming;
  /** An SSE field of this upstream's own that carries an error event. */
  errorField?: string;
}

export function openAiCompatible(quirks: DialectQuirks): Dialect {
  const chatFraming = { quick: quirks.chunkFraming && quickEvents(quirks.chunkFraming), errorField: quirks.errorField };
  const textFraming = { errorField: quirks.errorField };
  return {
    multipleChoices: quirks.multipleChoices ?? true,
    promptCount: quirks.promptCount,
    priorityOf: quirks.priorityOf,
    engineLoad: quirks.engineLoad,
    saltsPrefixCache: quirks.saltsPrefixCache ?? false,
    chat: {
      requestBody: (req, target) => chatBody(req, target, quirks),
      whole: (body) => chatReply(body, quirks),
      streamParser: () => new SseParser(chatFraming),
      streamEvent: (event) => chatEvent(event, quirks),
    },
    text: {
      requestBody: (req, target) => textBody(req, target, quirks),
      whole: (body) => textReply(body, quirks),
      streamParser: () => new SseParser(textFraming),
      streamEvent: (event) => textEvent(event, quirks),
    },
    embeddings: {
      requestBody: (req, upstreamModel) => embeddingsBody(req, upstreamModel, quirks),
      whole: embeddingsReply,
      inPlace: embeddingsInPlace,
    },
    error: (status, bodyText) => errorAnswer(status, bodyText, quirks),
  };
}
