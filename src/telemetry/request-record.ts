// What one request came to, filled in as it goes through the gateway and
// read when it ends: for its log line, its GenAI metrics and its span. Ids
// and counts only: never an API key, a prompt or a reply.
import type { ClientApi } from '../config.js';

export interface RequestRecord {
  /** The request's id as its client was given it (`x-request-id`). */
  id: string;
  api?: ClientApi;
  account?: string;
  keyId?: string;
  /** The model the client asked for, and the id of the model that served it. */
  model?: string;
  servedModel?: string;
  /** The requested model as metrics label it: a name the routing file lists; absent for a model not served (labelled `(unknown)`, so made-up names make no series). */
  modelLabel?: string;
  serviceTier?: string;
  /** The endpoint that answered (its URL), and its kind. */
  endpoint?: string;
  provider?: string;
  attempts: number;
  promptTokens?: number;
  cachedTokens?: number;
  completionTokens?: number;
  /** What the reply cost, in micro-units (charged when complete). */
  cost?: number;
  /** When the request arrived (performance.now()): the phases below are ms from then. */
  arrivedAt?: number;
  /** Its credit hold stood: key, body, checks and hold done. */
  admittedMs?: number;
  /** The answering attempt was sent upstream (a slot held), and the upstream answered (its headers). */
  sentMs?: number;
  answeredMs?: number;
  /** The first byte of its reply left for the client. */
  firstByteMs?: number;
  streamed?: boolean;
  /** Why a reply that had begun did not finish ('client_gone', 'upstream_broke_off'); its status stays 200. */
  brokenOff?: string;
  /** The reply's id (`chatcmpl-…`), and why each of its choices finished. */
  replyId?: string;
  finishReasons?: string[];
  /** The telemetry settings of the routing table the request started on: a reload mid-request changes neither. */
  settings?: { requestLog: boolean; metricsTopAccounts: number };
}

/** The GenAI conventions' name of each API's operation (gen_ai.operation.name): Messages and Responses are chat. */
export const GEN_AI_OPERATIONS: Record<ClientApi, string> = {
  chat: 'chat',
  completions: 'text_completion',
  embeddings: 'embeddings',
  messages: 'chat',
  responses: 'chat',
};
