// OpenAI's Batch API on the wire: the create request, the `batch` object, the
// input lines (`{custom_id, method, url, body}`) and the output and error
// files' lines (`{id, custom_id, response: {status_code, request_id, body},
// error}`), as the official clients read them.
import { z } from 'zod';
import type { BatchRecord, InputProblem, StoredLine } from '../batches/batch-store.js';
import type { FileRecord } from '../batches/file-store.js';
import { parseRequest } from './request-parsing.js';
import type { ApiError } from './errors.js';

/** The endpoints a batch may call, each with the client API that serves it. */
export const OPENAI_BATCH_ENDPOINTS = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completions',
  '/v1/embeddings': 'embeddings',
  '/v1/responses': 'responses',
} as const;
export type OpenAiBatchEndpoint = keyof typeof OPENAI_BATCH_ENDPOINTS;

const metadata = z
  .record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 keys')
  .nullish();

const batchCreate = z.looseObject({
  input_file_id: z.string().min(1).max(200),
  endpoint: z.enum(Object.keys(OPENAI_BATCH_ENDPOINTS) as [OpenAiBatchEndpoint, ...OpenAiBatchEndpoint[]]),
  completion_window: z.literal('24h'),
  metadata,
});
export type OpenAiBatchCreate = z.infer<typeof batchCreate>;

export const parseOpenAiBatchCreate = (body: unknown): OpenAiBatchCreate | ApiError => parseRequest(batchCreate, body);

const CUSTOM_ID_MAX = 512;

/** The most problems a refused input lists. */
export const PROBLEMS_LISTED = 100;

/** One line of an input file checked: its custom id and body, or what is wrong with it (lines count from 1). */
export function checkInputLine(text: string, line: number, endpoint: OpenAiBatchEndpoint): StoredLine | InputProblem {
  const problem = (code: string, message: string, param: string | null = null): InputProblem => ({ code, message, param, line });
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return problem('invalid_json_line', `Line ${line} is not valid JSON.`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return problem('invalid_request', `Line ${line} must be a JSON object.`);
  const l = parsed as Record<string, unknown>;
  if (typeof l.custom_id !== 'string' || l.custom_id === '' || l.custom_id.length > CUSTOM_ID_MAX) {
    return problem('invalid_custom_id', `Line ${line}: custom_id must be a string of 1 to ${CUSTOM_ID_MAX} characters.`, 'custom_id');
  }
  if (l.method !== 'POST') return problem('invalid_method', `Line ${line}: method must be POST.`, 'method');
  if (l.url !== endpoint) return problem('mismatched_endpoint', `Line ${line}: url must be the batch's endpoint, ${endpoint}.`, 'url');
  const body = l.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return problem('invalid_request', `Line ${line}: body must be a JSON object.`, 'body');
  if (typeof (body as Record<string, unknown>).model !== 'string') return problem('missing_required_parameter', `Line ${line}: body.model is required.`, 'body.model');
  return { customId: l.custom_id, body: body as Record<string, unknown> };
}

/** Splits an uploaded JSONL file into its lines (blank lines skipped), checking each; lines count from 1. */
export function readInputFile(content: Buffer, endpoint: OpenAiBatchEndpoint): { lines: StoredLine[]; problems: InputProblem[] } {
  const lines: StoredLine[] = [];
  const problems: InputProblem[] = [];
  const customIds = new Set<string>();
  // Line by line from the bytes ('\n' is never part of a longer UTF-8 character): decoded whole and split, a file of
  // 32 MiB held its thread some 50 ms before its first line was read.
  for (let at = 0, i = 0; at < content.length; i++) {
    const end = content.indexOf(0x0a, at);
    const text = content.toString('utf8', at, end === -1 ? content.length : end).trim();
    at = end === -1 ? content.length : end + 1;
    if (text === '') continue;
    const checked = checkInputLine(text, i + 1, endpoint);
    if ('code' in checked) problems.push(checked);
    else if (customIds.has(checked.customId)) problems.push({ code: 'duplicate_custom_id', message: `Line ${i + 1}: the custom_id '${checked.customId}' is used by an earlier line.`, param: 'custom_id', line: i + 1 });
    else {
      customIds.add(checked.customId);
      lines.push(checked);
    }
    if (problems.length >= PROBLEMS_LISTED) break;
  }
  if (lines.length === 0 && problems.length === 0) problems.push({ code: 'empty_file', message: 'The input file holds no requests.', param: null, line: null });
  return { lines, problems };
}

const seconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/** The `file` object: a stored file is ready as soon as it is stored. */
export function renderOpenAiFile(f: FileRecord) {
  return { id: f.id, object: 'file', bytes: f.bytes, created_at: seconds(f.createdAt), expires_at: seconds(f.expiresAt), filename: f.filename, purpose: f.purpose, status: 'processed', status_details: null };
}

/** The `batch` object. */
export function renderOpenAiBatch(b: BatchRecord) {
  const t = b.times;
  return {
    id: b.id,
    object: 'batch',
    endpoint: b.endpoint,
    model: b.model || undefined,
    errors: b.problems ? { object: 'list', data: b.problems } : null,
    input_file_id: b.inputFileId,
    completion_window: '24h',
    status: b.status,
    output_file_id: b.outputFileId,
    error_file_id: b.errorFileId,
    created_at: seconds(t.created),
    in_progress_at: seconds(t.inProgress),
    expires_at: seconds(t.expires),
    finalizing_at: seconds(t.finalizing),
    completed_at: seconds(t.completed),
    failed_at: seconds(t.failed),
    expired_at: seconds(t.expired),
    cancelling_at: seconds(t.cancelling),
    cancelled_at: seconds(t.cancelled),
    request_counts: { total: b.counts.total, completed: b.counts.succeeded, failed: b.counts.errored },
    usage: {
      input_tokens: b.usage.promptTokens,
      input_tokens_details: { cached_tokens: b.usage.cachedTokens },
      output_tokens: b.usage.completionTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: b.usage.promptTokens + b.usage.completionTokens,
    },
    metadata: b.metadata,
  };
}

/** An output file's line for a reply; `body` is its JSON text, as the API rendered it. */
export const openAiSucceeded = (lineId: string, customId: string, requestId: string, body: string) =>
  `{"id":${JSON.stringify(lineId)},"custom_id":${JSON.stringify(customId)},"response":{"status_code":200,"request_id":${JSON.stringify(requestId)},"body":${body}},"error":null}`;

/** An error file's line for a request the API refused or failed. */
export const openAiErrored = (lineId: string, customId: string, requestId: string, status: number, body: unknown) =>
  JSON.stringify({ id: lineId, custom_id: customId, response: { status_code: status, request_id: requestId, body }, error: null });

const UNRUN = {
  cancelled: { code: 'batch_cancelled', message: 'This request was not executed because the batch was cancelled.' },
  expired: { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' },
  lost: { code: 'request_lost', message: `This request was in flight on a gateway replica that stopped, every time it was tried.` },
};

/** An error file's line for a request that never ran (or never finished running). */
export const openAiUnrun = (lineId: string, customId: string, why: keyof typeof UNRUN) => JSON.stringify({ id: lineId, custom_id: customId, response: null, error: UNRUN[why] });
