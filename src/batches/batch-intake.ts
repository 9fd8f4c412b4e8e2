// A new batch, from either client API, checked and queued: its input read on
// the intake thread (input-reading.ts: its lines as stored, in an order that
// keeps those sharing a prompt prefix together), and its lines' models ones
// its key may call through the batch's API.
import type { Caller } from '../accounts/key-authenticator.js';
import type { ClientApi } from '../config.js';
import { findModel, type RoutingTable } from '../routing/routing-table.js';
import { createBatch, createFailedBatch, keepMsOf, readBatch, type BatchApi, type BatchRecord, type InputProblem } from './batch-store.js';
import type { ReadInput } from './input-reading.js';
import type { Redis } from 'ioredis';
import { PROBLEMS_LISTED } from '../protocol/openai-batches.js';

/**
 * The most lines a batch may have, and the most bytes of input (a file, or Anthropic's create body). Every line
 * is kept in Redis until it has run, beside its input file and its results, and a batch's input is read whole
 * into one replica's memory to be checked: 32 MiB and 50,000 lines (OpenAI's own line limit) keep one batch a
 * small part of a replica and of Redis. OpenAI allows 200 MB, Anthropic 256 MB and 100,000 requests.
 */
export const MAX_BATCH_LINES = 50_000;
export const MAX_BATCH_BYTES = 32 * 1024 * 1024;

/** Models the API serves, as OpenAI's and Anthropic's batch APIs call them. */
const SERVES: Record<ClientApi, 'chat' | 'completions' | 'embeddings'> = { chat: 'chat', completions: 'completions', embeddings: 'embeddings', messages: 'chat', responses: 'chat' };

/**
 * A batch's problems: those found reading its input, else each model its lines name that the key may not call
 * through the API, at the first line that names it.
 */
export function inputProblems(table: RoutingTable, caller: Caller, api: ClientApi, { models, problems: found }: ReadInput): InputProblem[] {
  if (found.length > 0) return found.slice(0, PROBLEMS_LISTED);
  const problems: InputProblem[] = [];
  for (const [id, line] of models) {
    if (problems.length >= PROBLEMS_LISTED) break;
    const model = findModel(table, id);
    if (!model || (caller.models !== null && !caller.models.includes(model.config.id))) {
      problems.push({ code: 'model_not_found', message: `Line ${line}: the model '${id}' does not exist or this key may not call it.`, param: 'body.model', line });
    } else if (!model.config.api.includes(SERVES[api])) {
      problems.push({ code: 'model_not_supported', message: `Line ${line}: the model '${id}' does not serve this batch's endpoint.`, param: 'body.model', line });
    }
  }
  return problems;
}

export interface BatchIntake {
  redis: Redis;
  table: RoutingTable;
  caller: Caller;
  id: string;
  api: BatchApi;
  endpoint: string;
  inputFileId: string | null;
  metadata: Record<string, string> | null;
  /** Its input as read on the intake thread. */
  input: ReadInput;
  /** Its problems (inputProblems); with any, the batch fails. */
  problems: InputProblem[];
}

/** Stores the batch: queued to run, or, where its input has problems, failed with them (OpenAI's way). Answers it as stored. */
export async function takeBatch(b: BatchIntake): Promise<BatchRecord> {
  const settings = b.table.settings.batches;
  const keepMs = keepMsOf(settings);
  const windowMs = settings.completionWindowS * 1000;
  const model = b.input.models[0]?.[0] ?? '';
  const base = { id: b.id, api: b.api, account: b.caller.account, keyId: b.caller.keyId, endpoint: b.endpoint, inputFileId: b.inputFileId, metadata: b.metadata, model, windowMs };
  if (b.problems.length > 0) await createFailedBatch(b.redis, base, b.problems, keepMs);
  else await createBatch(b.redis, { ...base, stored: b.input }, { ms: keepMs, capBytes: settings.storedBytesPerAccount });
  return (await readBatch(b.redis, b.caller.account, b.id))!;
}
