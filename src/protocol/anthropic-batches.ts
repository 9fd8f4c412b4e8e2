// Anthropic's Message Batches on the wire: the create request (`requests:
// [{custom_id, params}]`), the `message_batch` object and the results lines
// (`{custom_id, result: {type: succeeded | errored | canceled | expired}}`),
// as @anthropic-ai/sdk and the Python client read them.
import { z } from 'zod';
import { hasEnded, type BatchRecord } from '../batches/batch-store.js';
import { parseRequest } from './request-parsing.js';
import { invalidParameter, type ApiError } from './errors.js';

const request = z.looseObject({
  custom_id: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, '1 to 64 letters, digits, hyphens and underscores'),
  params: z.looseObject({ model: z.string() }),
});
const batchCreate = z.looseObject({ requests: z.array(request).min(1) });
export type AnthropicBatchCreate = z.infer<typeof batchCreate>;

/**
 * The create request, its custom ids unique; `maxLines`: the most requests a batch may have. Counted before any is
 * checked (checked whole, 100,000 took 220 to 450 ms), then checked one by one, each 400 naming its request.
 */
export function parseAnthropicBatchCreate(body: unknown, maxLines: number): AnthropicBatchCreate | ApiError {
  const given = (body as { requests?: unknown } | null)?.requests;
  // Not an array, or an empty one: the schema's own 400, which checks no request.
  if (!Array.isArray(given) || given.length === 0) return parseRequest(batchCreate, body);
  if (given.length > maxLines) return invalidParameter('requests', `A batch may hold at most ${maxLines} requests; this one holds ${given.length}.`);
  const requests: AnthropicBatchCreate['requests'] = [];
  const seen = new Set<string>();
  for (const [i, r] of given.entries()) {
    const checked = parseRequest(request, r, ['requests', i]);
    if (!('custom_id' in checked)) return checked;
    if (seen.has(checked.custom_id)) return invalidParameter(`requests[${i}].custom_id`, `Duplicate custom_id '${checked.custom_id}': each request in a batch needs its own.`);
    seen.add(checked.custom_id);
    requests.push(checked);
  }
  return { ...(body as object), requests };
}

const rfc3339 = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** The `message_batch` object; `resultsUrl`: where its results are read, once it has ended. */
export function renderAnthropicBatch(b: BatchRecord, resultsUrl: string) {
  const t = b.times;
  const ended = hasEnded(b.status);
  const unrun = b.counts.total - b.counts.succeeded - b.counts.errored;
  return {
    id: b.id,
    type: 'message_batch',
    processing_status: ended ? 'ended' : b.status === 'cancelling' ? 'canceling' : 'in_progress',
    request_counts: {
      processing: ended ? 0 : unrun,
      succeeded: b.counts.succeeded,
      errored: b.counts.errored,
      canceled: ended && b.status === 'cancelled' ? unrun : 0,
      expired: ended && b.status === 'expired' ? unrun : 0,
    },
    ended_at: rfc3339(t.completed ?? t.expired ?? t.cancelled),
    created_at: rfc3339(t.created),
    expires_at: rfc3339(t.expires),
    archived_at: null,
    cancel_initiated_at: rfc3339(t.cancelling),
    results_url: ended ? resultsUrl : null,
  };
}

/** A results line for a reply; `message` is its JSON text. */
export const anthropicSucceeded = (customId: string, message: string) => `{"custom_id":${JSON.stringify(customId)},"result":{"type":"succeeded","message":${message}}}`;

/** A results line for a request refused or failed; `error` is Anthropic's error body. */
export const anthropicErrored = (customId: string, error: unknown) => JSON.stringify({ custom_id: customId, result: { type: 'errored', error } });

/** A results line for a request that never ran: its batch was cancelled, or its window ended first. */
export const anthropicUnrun = (customId: string, why: 'canceled' | 'expired') => JSON.stringify({ custom_id: customId, result: { type: why } });
