// What a batch line's result looks like in each client API's results: a
// reply, a failure, a line lost with its replica every time it was tried, a
// line that never ran. A stored result starts with its kind, `s` (succeeded)
// or `e` (errored), so that OpenAI's output and error files can be told apart
// without reading the line.
import type { BatchApi } from './batch-store.js';
import { anthropicErrored, anthropicSucceeded, anthropicUnrun } from '../protocol/anthropic-batches.js';
import { ApiError, openAiError } from '../protocol/errors.js';
import { anthropicError } from '../protocol/messages-response.js';
import { openAiErrored, openAiSucceeded, openAiUnrun } from '../protocol/openai-batches.js';

export const SUCCEEDED = 's';
export const ERRORED = 'e';

export interface LineFormat {
  /** A reply's result; `body` is the reply's JSON text. */
  succeeded(customId: string, requestId: string, body: string): string;
  failed(customId: string, requestId: string, err: ApiError): string;
  lost(customId: string, requestId: string): string;
  /** A line of a batch that ended before it ran. */
  unrun(customId: string, lineId: string, why: 'cancelled' | 'expired'): string;
}

const lostError = () => new ApiError(500, 'server_error', 'This request was in flight on a gateway replica that stopped, every time it was tried; nothing was charged for it.', 'request_lost');

export const LINE_FORMATS: Record<BatchApi, LineFormat> = {
  openai: {
    succeeded: (customId, requestId, body) => SUCCEEDED + openAiSucceeded(`batch_req_${requestId}`, customId, requestId, body),
    failed(customId, requestId, err) {
      const { status, body } = openAiError(err);
      return ERRORED + openAiErrored(`batch_req_${requestId}`, customId, requestId, status, body);
    },
    lost: (customId, requestId) => ERRORED + openAiUnrun(`batch_req_${requestId}`, customId, 'lost'),
    unrun: (customId, lineId, why) => openAiUnrun(`batch_req_${lineId}`, customId, why),
  },
  anthropic: {
    succeeded: (customId, _requestId, body) => SUCCEEDED + anthropicSucceeded(customId, body),
    failed: (customId, _requestId, err) => ERRORED + anthropicErrored(customId, anthropicError(err).body),
    lost: (customId) => ERRORED + anthropicErrored(customId, anthropicError(lostError()).body),
    unrun: (customId, _lineId, why) => anthropicUnrun(customId, why === 'cancelled' ? 'canceled' : 'expired'),
  },
};
