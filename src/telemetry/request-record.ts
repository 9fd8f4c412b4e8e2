// What one request came to, filled in as it goes through the gateway and
// read when it ends: for its log line, its GenAI metrics and its span. Ids
// and counts only: never an API key, a prompt or a reply.
import type { ClientApi } from '../config.js';

/**
 * A class, every field set from the start, so that every request's record has
 * one shape: a record that gained its fields one by one, in whatever order
 * its path set them, fell to V8's slow (dictionary) properties, and every
 * read of it (the log line, the metrics, the span) with it.
 */
export class RequestRecord {
  api: ClientApi | undefined = undefined;
  account: string | undefined = undefined;
  keyId: string | undefined = undefined;
  /** The model the client asked for, and the id of the model that served it. */
  model: string | undefined = undefined;
  servedModel: string | undefined = undefined;
  serviceTier: string | undefined = undefined;
  /** The endpoint that answered (its URL), and its kind. */
  endpoint: string | undefined = undefined;
  provider: string | undefined = undefined;
  attempts = 0;
  promptTokens: number | undefined = undefined;
  cachedTokens: number | undefined = undefined;
  completionTokens: number | undefined = undefined;
  /** What the reply cost, in micro-units (charged when complete). */
  cost: number | undefined = undefined;
  /** ms from the request's arrival to the first byte of its reply. */
  firstByteMs: number | undefined = undefined;
  streamed: boolean | undefined = undefined;
  /** Why a reply that had begun did not finish ('client_gone', 'upstream_broke_off'); its status stays 200. */
  brokenOff: string | undefined = undefined;
  /** The reply's id (`chatcmpl-…`), and why each of its choices finished. */
  replyId: string | undefined = undefined;
  finishReasons: string[] | undefined = undefined;
  /** The telemetry settings of the routing table the request started on: a reload mid-request changes neither. */
  settings: { requestLog: boolean; metricsTopAccounts: number } | undefined = undefined;

  /** `id`: the request's id as its client was given it (`x-request-id`). */
  constructor(readonly id: string) {}
}

/** The GenAI conventions' name of each API's operation (gen_ai.operation.name): Messages and Responses are chat. */
export const GEN_AI_OPERATIONS: Record<ClientApi, string> = {
  chat: 'chat',
  completions: 'text_completion',
  embeddings: 'embeddings',
  messages: 'chat',
  responses: 'chat',
};
