// The error contract: every failure Parley reports is an ApiError, rendered as
// OpenAI's body {"error": {"message", "type", "param", "code"}}. This file is
// the one place that decides a failure's status, type and code.
import { bounded } from './bounded-text.js';

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'insufficient_quota'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'server_error'
  | 'service_unavailable';

/**
 * Not a failure to report: the request's client has left (or shutdown's grace
 * period ended it), so there is no one to answer. The server drops the
 * connection on it instead of rendering a body.
 */
export class Cancelled extends Error {
  override readonly name = 'AbortError';

  constructor() {
    super('the request was cancelled');
  }
}

export class ApiError extends Error {
  /** For a failure the upstream answered with a status of its own (a 5xx): that status. */
  upstreamStatus: number | undefined;

  constructor(
    readonly status: number,
    readonly type: ErrorType,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** How a client API writes a failure: its status and body (OpenAI's, or Anthropic's: protocol/messages-response.ts). */
export type ErrorShape = (err: ApiError) => { status: number; body: unknown };

export const openAiError: ErrorShape = (err) => ({ status: err.status, body: err.toBody() });

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export const invalidJson = (detail: string) =>
  new ApiError(400, 'invalid_request_error', `We could not parse the JSON body of your request (${detail}). Send a JSON object with Content-Type: application/json.`, 'invalid_json');

export const bodyTooDense = (bytesPerValue: number) =>
  new ApiError(400, 'invalid_request_error', `The request's JSON holds more than one object or array per ${bytesPerValue} bytes, the most a request body or a batch's input may.`, 'body_too_dense');

export const unsupportedContentType = (got: string) =>
  new ApiError(400, 'invalid_request_error', `Content-Type "${got}" is not supported; send the body as application/json.`, 'invalid_content_type');

export const invalidParameter = (param: string | null, message: string) =>
  new ApiError(400, 'invalid_request_error', message, 'invalid_parameter', param);

/** `promptField`: the request field that holds the prompt (chat's `messages`, Responses' `input`). */
export const contextLengthExceeded = (message: string, promptField = 'messages') =>
  new ApiError(400, 'invalid_request_error', message, 'context_length_exceeded', promptField);

/** A prompt that alone fills the window, in Anthropic's words (for the APIs that fit the reply into the room left). */
export const promptTooLong = (promptTokens: number, window: number, bound: 'at least' | '' = '', promptField?: string) =>
  contextLengthExceeded(`prompt is too long: ${bound ? `${bound} ` : ''}${promptTokens} tokens > ${window} maximum`, promptField);

/** Throws context_length_exceeded when prompt plus reply do not fit the window. */
export function checkContextWindow(window: number, promptTokens: number, replyTokens: number, promptField?: string): void {
  const requested = promptTokens + replyTokens;
  if (requested <= window) return;
  throw contextLengthExceeded(
    `This model's maximum context length is ${window} tokens. However, you requested ${requested} tokens ` +
      `(${promptTokens} in the messages, ${replyTokens} in the completion). Please reduce the length of the messages or the completion.`,
    promptField,
  );
}

export const modelNotFound = (model: string) =>
  new ApiError(404, 'invalid_request_error', `The model \`${bounded(model)}\` does not exist or you do not have access to it. GET /v1/models lists the models this gateway serves.`, 'model_not_found', 'model');

const API_PATHS = { chat: '/v1/chat/completions', completions: '/v1/completions', embeddings: '/v1/embeddings' } as const;

/** A model asked for through an API it does not serve. */
export const apiNotServed = (model: string, api: keyof typeof API_PATHS, served: readonly (keyof typeof API_PATHS)[]) =>
  new ApiError(
    400,
    'invalid_request_error',
    `The model \`${model}\` does not support ${API_PATHS[api]}; it serves ${served.map((a) => API_PATHS[a]).join(' and ')}.`,
    'model_not_supported',
    'model',
  );

export const routeNotFound = (method: string, path: string) =>
  new ApiError(404, 'invalid_request_error', `Unknown request URL: ${bounded(method)} ${bounded(path)}. Please check the URL and method.`, 'unknown_url');

export const malformedUrl = () => new ApiError(400, 'invalid_request_error', 'The request URL holds malformed percent-encoding.', 'invalid_url');

export const bodyTooLarge = (limitBytes: number) =>
  new ApiError(413, 'invalid_request_error', `The request body is larger than the limit of ${limitBytes} bytes.`, 'request_too_large');

export const bodiesInFlight = (limitBytes: number) =>
  new ApiError(
    429,
    'rate_limit_error',
    `This account's requests in flight on this server hold ${limitBytes} bytes (request bodies, the files batch creates read, downloads under way), the most they may; send this one again once some have finished.`,
    'request_bodies_in_flight',
    null,
    { 'retry-after': '1' },
  );

export const intakeTimeSpent = (secondsPerMinute: number, retryAfterSeconds: number) =>
  new ApiError(
    429,
    'rate_limit_error',
    `This account's batch inputs took ${secondsPerMinute} s to read on this server this minute, the most a minute allows; send this one again in ${retryAfterSeconds} s.`,
    'batch_intake_time',
    null,
    { 'retry-after': String(retryAfterSeconds) },
  );

export const noHealthyUpstream = (model: string, retryAfterSeconds: number) =>
  new ApiError(503, 'service_unavailable', `No upstream for model \`${model}\` can take this request right now. Retry after ${retryAfterSeconds} s.`, 'upstream_unavailable', null, { 'retry-after': String(retryAfterSeconds) });

export const upstreamsBusy = (model: string, retryAfterSeconds: number) =>
  new ApiError(503, 'service_unavailable', `Every upstream for model \`${model}\` is at capacity and its queue is full. Retry after ${retryAfterSeconds} s.`, 'queue_full', null, { 'retry-after': String(retryAfterSeconds) });

/** OpenAI's answer to a flex request it has no capacity for: nothing was served, and nothing is charged. */
export const flexUnavailable = (model: string, retryAfterSeconds: number) =>
  new ApiError(429, 'rate_limit_error', `Model \`${model}\` has no capacity free for the flex tier now. Retry later, or send the request at the default tier.`, 'resource_unavailable', null, { 'retry-after': String(retryAfterSeconds) });

export const upstreamUnreachable = (detail: string) =>
  new ApiError(502, 'server_error', `The model's server could not be reached: ${detail}`, 'upstream_unreachable');

export const upstreamFailed = (detail: string, upstreamStatus?: number) => {
  const err = new ApiError(502, 'server_error', `The model's server failed before it answered: ${detail}`, 'upstream_error');
  err.upstreamStatus = upstreamStatus;
  return err;
};

/** An upstream's own 4xx answer that is the caller's fault, passed on with its message. */
export const upstreamRejected = (status: number, message: string, param: string | null) =>
  new ApiError(status, 'invalid_request_error', message, 'upstream_rejected', param);

/** The body of the error event that ends a stream the model broke off (SPEC 2.5). */
export const STREAM_BROKE_OFF_BODY: ErrorBody = {
  error: {
    message: 'The model stopped answering before the reply was complete. Nothing was charged for this reply; please retry.',
    type: 'server_error',
    param: null,
    code: null,
  },
};

/** Every 401: missing, malformed, unknown or revoked key. */
export const invalidApiKey = (message: string) =>
  new ApiError(401, 'authentication_error', message, 'invalid_api_key');

export const insufficientBalance = () =>
  new ApiError(
    402,
    'insufficient_quota',
    'Your account has no credit left for this request. Top up on the platform (or ask your operator for a grant) and retry.',
    'insufficient_balance',
  );

/** A key's own budget is spent: 429 insufficient_quota, as OpenAI answers an exhausted quota, naming the key's budget rather than the balance. */
export const keyBudgetSpent = (budget: string, period: 'day' | 'month' | 'total', renewsAt: number | null) =>
  new ApiError(
    429,
    'insufficient_quota',
    `This API key's budget of ${budget}${period === 'total' ? '' : ` per ${period}`} is spent${renewsAt === null ? '' : `; it renews at ${new Date(renewsAt).toISOString()}`}. Ask your platform team to raise it, or use another key.`,
    'insufficient_quota',
  );

export const rateLimitExceeded = (what: 'requests' | 'tokens', limit: number, retryAfterSeconds: number, headers: Record<string, string>) =>
  new ApiError(
    429,
    'rate_limit_error',
    `Rate limit reached: ${limit} ${what} per minute for this account. Retry after ${retryAfterSeconds} s.`,
    'rate_limit_exceeded',
    null,
    { ...headers, 'retry-after': String(retryAfterSeconds) },
  );

/** An account at its bound of requests in flight: one may go in as soon as one of them ends. */
export const tooManyInFlight = (limit: number, headers: Record<string, string>) =>
  new ApiError(
    429,
    'rate_limit_error',
    `Rate limit reached: ${limit} requests in flight at once for this account. Retry when one of them has ended.`,
    'rate_limit_exceeded',
    null,
    { ...headers, 'retry-after': '1' },
  );

/**
 * A request that may take more tokens (its prompt and the most its replies
 * may take) than its rate limit allows in a whole minute: no wait lets it
 * through, so it is told so, with no Retry-After, as OpenAI answers "Request
 * too large", and a batch line fails with it rather than waiting.
 */
export class RequestTooLarge extends ApiError {
  constructor(limit: number, requested: number) {
    super(429, 'rate_limit_error', `Request too large: it may take ${requested} tokens (the prompt and the most the reply may take), and the limit is ${limit} tokens per minute. Lower max_tokens or shorten the prompt.`, 'rate_limit_exceeded');
  }
}

/** Redis (keys, balances, holds) unreachable, or refusing the request's work (full): fail closed, never serve for free. */
export const stateUnavailable = () =>
  new ApiError(503, 'service_unavailable', "Parley's account store cannot take this request right now. Nothing was charged; retry after 1 s.", 'service_unavailable', null, { 'retry-after': '1' });

export const shuttingDown = () =>
  new ApiError(503, 'service_unavailable', 'This gateway replica is shutting down; retry and another replica will answer.', 'shutting_down', null, { 'retry-after': '1', connection: 'close' });

export const internalError = () =>
  new ApiError(500, 'server_error', 'The gateway failed to handle this request. It has been logged; please retry.');
