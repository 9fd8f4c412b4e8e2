// A batch's input read into what is stored of it: its lines checked (an
// OpenAI input file, or Anthropic's create body), each line's text as stored,
// the order to run them in, and the models they name. It runs on the intake
// thread (intake-thread.ts): parsing a create body of 32 MiB takes a second,
// which on the main thread every other request waited out.
import { createHash } from 'node:crypto';
import { parseAnthropicBatchCreate } from '../protocol/anthropic-batches.js';
import { ApiError } from '../protocol/errors.js';
import { parseJsonBody, tooDense } from '../protocol/http-io.js';
import { readInputFile, type OpenAiBatchEndpoint } from '../protocol/openai-batches.js';
import type { InputProblem, StoredLine } from './batch-store.js';
import { storedLines, type StoredLines } from './stored-lines.js';

/** How much of a prompt's first part decides its group: enough for any system prompt's start, cheap to hash. */
const PREFIX_CHARS = 2048;

/** A batch's input, as sent to the intake thread: its bytes in parts, in order (joined there, not on the main thread). */
export type BatchInput = { kind: 'openai'; endpoint: OpenAiBatchEndpoint; content: Uint8Array[] } | { kind: 'anthropic'; content: Uint8Array[]; maxLines: number };

/** A batch's input as read: what the main thread checks and stores, and nothing it would have to parse again. */
export interface ReadInput {
  lines: StoredLines;
  /** The order to run the lines in (indices into `lines`). */
  order: number[];
  /** Each model the lines name, with the first line (from 1) that names it. */
  models: [model: string, line: number][];
  /** What is wrong with the input, where anything is (the batch then fails). */
  problems: InputProblem[];
}

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
 * it (the engine's prefix cache then serves all but the first; llm-d's batch gateway sorts by system prompt the
 * same way).
 */
export function cacheAwareOrder(lines: StoredLine[]): number[] {
  const groups = new Map<string, number[]>();
  for (const [i, l] of lines.entries()) {
    const key = prefixGroup(l.body);
    const group = groups.get(key);
    if (group) group.push(i);
    else groups.set(key, [i]);
  }
  return [...groups.values()].flat();
}

/** A batch's lines, or the 400 its input gets. */
function linesOf(input: BatchInput): { lines: StoredLine[]; problems: InputProblem[] } | ApiError {
  const [first, ...rest] = input.content;
  const content = rest.length === 0 && first ? Buffer.from(first.buffer, first.byteOffset, first.byteLength) : Buffer.concat(input.content);
  // As dense as a request body may be, or refused before the parse: 32 MiB of `{},` took the thread 7 s and the
  // process 1 GB to read, and a refused create is free to its sender.
  const refusal = tooDense(content);
  if (refusal) return refusal;
  if (input.kind === 'openai') return readInputFile(content, input.endpoint);
  let body: unknown;
  try {
    body = parseJsonBody([content], content.length);
  } catch (err) {
    return err as ApiError;
  }
  const request = parseAnthropicBatchCreate(body, input.maxLines);
  if (request instanceof ApiError) return request;
  return { lines: request.requests.map((r) => ({ customId: r.custom_id, body: r.params as Record<string, unknown> })), problems: [] };
}

/** Reads a batch's input: its lines as stored, their order and models, or the 400 it gets. */
export function readBatchInput(input: BatchInput): ReadInput | ApiError {
  const read = linesOf(input);
  if (read instanceof ApiError) return read;
  const { lines, problems } = read;
  const models = new Map<string, number>();
  for (const [i, l] of lines.entries()) if (!models.has(l.body.model as string)) models.set(l.body.model as string, i + 1);
  if (problems.length > 0) return { lines: storedLines([]), order: [], models: [...models], problems };
  return { lines: storedLines(lines.map((l) => JSON.stringify([l.customId, l.body]))), order: cacheAwareOrder(lines), models: [...models], problems };
}
