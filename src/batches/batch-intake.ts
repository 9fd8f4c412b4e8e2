// A new batch, from either client API, checked and queued: its lines' models
// must be ones its key may call through the batch's API, and its lines run in
// an order that keeps those sharing a prompt prefix together (the engine's
// prefix cache then serves all but the first; llm-d's batch gateway sorts by
// system prompt the same way).
import { createHash } from 'node:crypto';
import type { Caller } from '../accounts/key-authenticator.js';
import type { ClientApi } from '../config.js';
import { findModel, type RoutingTable } from '../routing/routing-table.js';
import { createBatch, createFailedBatch, keepMsOf, readBatch, type BatchApi, type BatchRecord, type InputProblem, type StoredLine } from './batch-store.js';
import type { Redis } from 'ioredis';
import { PROBLEMS_LISTED } from '../protocol/openai-batches.js';
import { WorkSlices } from './work-slices.js';

/**
 * The most lines a batch may have, and the most bytes of input (a file, or Anthropic's create body). Every line
 * is kept in Redis until it has run, beside its input file and its results, and a batch's input is read whole
 * into one replica's memory to be checked: 32 MiB and 50,000 lines (OpenAI's own line limit) keep one batch a
 * small part of a replica and of Redis. OpenAI allows 200 MB, Anthropic 256 MB and 100,000 requests.
 */
export const MAX_BATCH_LINES = 50_000;
export const MAX_BATCH_BYTES = 32 * 1024 * 1024;

/** How much of a prompt's first part decides its group: enough for any system prompt's start, cheap to hash. */
const PREFIX_CHARS = 2048;

/** Models the API serves, as OpenAI's and Anthropic's batch APIs call them. */
const SERVES: Record<ClientApi, 'chat' | 'completions' | 'embeddings'> = { chat: 'chat', completions: 'completions', embeddings: 'embeddings', messages: 'chat', responses: 'chat' };

/** What lines sharing a prompt prefix have in common: model, system prompt, and the first part of the first message or prompt. */
function prefixGroup(body: Record<string, unknown>): string {
  const messages = body.messages as unknown[] | undefined;
  const input = body.input;
  const first = messages?.[0] ?? (Array.isArray(input) ? input[0] : input) ?? body.prompt ?? null;
  const text = JSON.stringify([body.model, body.system ?? body.instructions ?? null, JSON.stringify(first ?? null).slice(0, PREFIX_CHARS)]);
  return createHash('sha1').update(text).digest('base64');
}

/**
 * The order to run lines in: groups by prefix, each group where its first line is, lines in input order within
 * it. A large batch is grouped in slices (50,000 lines take about 270 ms here: work-slices.ts), so other
 * requests are served meanwhile.
 */
export async function cacheAwareOrder(lines: StoredLine[]): Promise<number[]> {
  const groups = new Map<string, number[]>();
  const slices = new WorkSlices();
  for (const [i, l] of lines.entries()) {
    if (slices.due()) await slices.pause();
    const key = prefixGroup(l.body);
    const group = groups.get(key);
    if (group) group.push(i);
    else groups.set(key, [i]);
  }
  return [...groups.values()].flat();
}

/**
 * A batch's problems: those found reading its input, else each model its lines name that the key may not call
 * through the API, at the first line that names it.
 */
export function inputProblems(table: RoutingTable, caller: Caller, api: ClientApi, lines: StoredLine[], found: InputProblem[]): InputProblem[] {
  if (found.length > 0) return found.slice(0, PROBLEMS_LISTED);
  const checked = new Set<string>();
  const problems: InputProblem[] = [];
  lines.forEach((l, i) => {
    const id = l.body.model as string;
    if (checked.has(id) || problems.length >= PROBLEMS_LISTED) return;
    checked.add(id);
    const model = findModel(table, id);
    if (!model || (caller.models !== null && !caller.models.includes(model.config.id))) {
      problems.push({ code: 'model_not_found', message: `Line ${i + 1}: the model '${id}' does not exist or this key may not call it.`, param: 'body.model', line: i + 1 });
    } else if (!model.config.api.includes(SERVES[api])) {
      problems.push({ code: 'model_not_supported', message: `Line ${i + 1}: the model '${id}' does not serve this batch's endpoint.`, param: 'body.model', line: i + 1 });
    }
  });
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
  lines: StoredLine[];
  /** Its problems (inputProblems); with any, the batch fails. */
  problems: InputProblem[];
}

/** Stores the batch: queued to run, or, where its input has problems, failed with them (OpenAI's way). Answers it as stored. */
export async function takeBatch(b: BatchIntake): Promise<BatchRecord> {
  const settings = b.table.settings.batches;
  const keepMs = keepMsOf(settings);
  const windowMs = settings.completionWindowS * 1000;
  const model = String(b.lines[0]?.body.model ?? '');
  const base = { id: b.id, api: b.api, account: b.caller.account, keyId: b.caller.keyId, endpoint: b.endpoint, inputFileId: b.inputFileId, metadata: b.metadata, model, windowMs };
  if (b.problems.length > 0) await createFailedBatch(b.redis, base, b.problems, keepMs);
  else await createBatch(b.redis, { ...base, lines: b.lines, order: await cacheAwareOrder(b.lines) }, { ms: keepMs, capBytes: settings.storedBytesPerAccount });
  return (await readBatch(b.redis, b.caller.account, b.id))!;
}
