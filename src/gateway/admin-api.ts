// The admin HTTP API, /admin/v1/...: everything the operator's commands do,
// for automation, calling the same operations (operator/operations.ts). It
// is on only when PARLEY_ADMIN_TOKEN is set, and then needs `Authorization:
// Bearer <that token>`; otherwise every /admin path answers 404, whoever
// asks (behind a service-mesh sidecar every request comes from 127.0.0.1,
// so where a request comes from proves nothing). Its OpenAPI 3.1 document
// is made from the routes below and the zod schemas that validate them.
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { activeBatches, batchSummary } from '../batches/batch-progress.js';
import { usageCsv } from '../billing/usage-events.js';
import { inputs, OperationRefused, operations, type Operator } from '../operator/operations.js';
import { ApiError, routeNotFound } from '../protocol/errors.js';
import { decodePathSegment, readJsonBody, sendDownload, sendJson } from '../protocol/http-io.js';
import { failClosed } from './fail-closed.js';
import type { GatewayContext } from './context.js';

const MAX_BODY_BYTES = 64 * 1024;
export const ADMIN_PREFIX = '/admin/v1/';

interface Call {
  op: Operator;
  params: string[];
  query: URLSearchParams;
  req: IncomingMessage;
  res: ServerResponse;
  ctx: GatewayContext;
  body: () => Promise<unknown>;
}

interface Route {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** The path after /admin/v1, with {name} for each parameter, as OpenAPI writes it. */
  path: string;
  summary: string;
  body?: z.ZodType;
  idempotent?: boolean;
  query?: string[];
  /** Answers JSON, or writes the response itself and answers undefined. */
  handle(call: Call): Promise<unknown>;
}

const ROUTES: Route[] = [
  { method: 'GET', path: '/accounts', summary: 'Every account with its balance', handle: ({ op }) => operations.listAccounts(op) },
  { method: 'POST', path: '/accounts', summary: 'Make an account, its first member and its first key (shown once)', body: inputs.accountCreate, handle: async ({ op, body }) => operations.createAccount(op, await body()) },
  { method: 'GET', path: '/accounts/{account}', summary: 'One account (an id or a member email)', handle: ({ op, params }) => operations.getAccount(op, params[0]) },
  { method: 'GET', path: '/accounts/{account}/members', summary: "The account's members (their emails)", handle: ({ op, params }) => operations.listMembers(op, params[0]) },
  { method: 'POST', path: '/accounts/{account}/members', summary: 'Add a member, who logs in to the platform with this email and password', body: inputs.memberAdd, handle: async ({ op, params, body }) => operations.addMember(op, params[0], await body()) },
  { method: 'PUT', path: '/accounts/{account}/rate-limits', summary: "Set or clear the account's rate limits", body: inputs.accountLimits, handle: async ({ op, params, body }) => operations.setAccountLimits(op, params[0], await body()) },
  {
    method: 'POST', path: '/accounts/{account}/credit', summary: 'Grant or deduct credit; with an Idempotency-Key, applied once', body: inputs.creditChange, idempotent: true,
    handle: async ({ op, params, body, req }) => operations.changeCredit(op, params[0], await body(), header(req, 'idempotency-key')),
  },
  { method: 'GET', path: '/accounts/{account}/keys', summary: "The account's keys, with their limits and spend", handle: ({ op, params }) => operations.listKeys(op, params[0]) },
  { method: 'POST', path: '/accounts/{account}/keys', summary: 'Make a key (shown once) with its limits', body: inputs.keyCreate, handle: async ({ op, params, body }) => operations.createKey(op, params[0], await body()) },
  { method: 'PATCH', path: '/keys/{key}', summary: "Change a key's limits (null clears one)", body: inputs.keyLimits, handle: async ({ op, params, body }) => operations.setKeyLimits(op, params[0], await body()) },
  { method: 'DELETE', path: '/keys/{key}', summary: 'Revoke a key, on every replica at once', handle: ({ op, params }) => operations.revokeKey(op, params[0]) },
  { method: 'POST', path: '/credit-codes', summary: 'Make credit codes a team redeems on the platform', body: inputs.creditCodes, handle: async ({ op, body }) => operations.createCreditCodes(op, await body()) },
  {
    method: 'GET', path: '/usage.csv', summary: 'Usage events as CSV', query: ['account', 'since', 'until'],
    async handle({ op, query, res, ctx }) {
      const events = await operations.usageEvents(op, { account: query.get('account') ?? undefined, since: query.get('since') ?? undefined, until: query.get('until') ?? undefined });
      await sendDownload(res, { 'content-type': 'text/csv; charset=utf-8' }, usageCsv(events), ctx.routing().settings.clientSendTimeoutMs);
      return undefined;
    },
  },
  { method: 'GET', path: '/audit', summary: 'The newest operator actions first: who, what, before and after', query: ['count'], handle: ({ op, query }) => operations.listAudit(op, Number(query.get('count') ?? 100) || 100) },
  { method: 'GET', path: '/batches', summary: 'The batches with lines still to run, fleet-wide, oldest first: account, status, lines by state, cost so far', handle: async ({ ctx }) => ({ object: 'list', data: (await activeBatches(ctx.redis)).map(batchSummary) }) },
  { method: 'GET', path: '/endpoints', summary: "Each model's endpoints: health, circuit, load, latency", handle: async ({ ctx }) => ({ object: 'list', data: ctx.router.snapshot() }) },
];

const header = (req: IncomingMessage, name: string) => {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
};

const MATCHERS = ROUTES.map((route) => ({ route, pattern: new RegExp(`^${route.path.replace(/\{\w+\}/g, '([^/]+)')}$`) }));

/** The OpenAPI 3.1 document of the routes, their request bodies from the zod schemas that validate them. */
function openApiDocument() {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of ROUTES) {
    const parameters = [
      ...[...r.path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({ name, in: 'path', required: true, schema: { type: 'string' } })),
      ...(r.query ?? []).map((name) => ({ name, in: 'query', required: false, schema: { type: 'string' } })),
      ...(r.idempotent ? [{ name: 'Idempotency-Key', in: 'header', required: false, schema: { type: 'string', maxLength: 200 } }] : []),
    ];
    (paths[`/admin/v1${r.path}`] ??= {})[r.method.toLowerCase()] = {
      summary: r.summary,
      ...(parameters.length ? { parameters } : {}),
      ...(r.body ? { requestBody: { required: true, content: { 'application/json': { schema: z.toJSONSchema(r.body, { io: 'input' }) } } } } : {}),
      responses: {
        '200': { description: 'Done', content: { [r.path.endsWith('.csv') ? 'text/csv' : 'application/json']: {} } },
        default: { description: "An error, in OpenAI's shape", content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
      },
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Parley admin API', version: '1' },
    security: [{ adminToken: [] }],
    components: {
      securitySchemes: { adminToken: { type: 'http', scheme: 'bearer', description: 'PARLEY_ADMIN_TOKEN' } },
      schemas: {
        Error: {
          type: 'object',
          properties: { error: { type: 'object', properties: { message: { type: 'string' }, type: { type: 'string' }, param: { type: ['string', 'null'] }, code: { type: ['string', 'null'] } } } },
        },
      },
    },
    paths,
  };
}

let document: ReturnType<typeof openApiDocument> | undefined;

/** The admin token's holder, or throws: 404 when no token is set (the API is off), 401 for a wrong one. */
function authorize(req: IncomingMessage, method: string, path: string): string {
  const token = process.env.PARLEY_ADMIN_TOKEN;
  if (!token) throw routeNotFound(method, path);
  const given = Buffer.from(/^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '');
  const expected = Buffer.from(token);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    throw new ApiError(401, 'authentication_error', 'The admin API needs Authorization: Bearer <PARLEY_ADMIN_TOKEN>.', 'invalid_admin_token');
  }
  return process.env.PARLEY_ADMIN_TOKEN_NAME || 'admin-token';
}

/** Serves /admin/endpoints (the older path of /admin/v1/endpoints) and everything under /admin/v1/. */
export async function handleAdmin(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, method: string, path: string, search: string): Promise<void> {
  const actor = authorize(req, method, path);
  const sub = path === '/admin/endpoints' ? '/endpoints' : path.slice(ADMIN_PREFIX.length - 1);
  if (method === 'GET' && sub === '/openapi.json') return sendJson(res, 200, (document ??= openApiDocument()));
  for (const { route, pattern } of MATCHERS) {
    const m = pattern.exec(sub);
    if (!m || route.method !== method) continue;
    const call: Call = {
      op: { redis: ctx.redis, secret: ctx.keySecret, actor },
      params: m.slice(1).map(decodePathSegment),
      query: new URLSearchParams(search),
      req,
      res,
      ctx,
      body: () => readJsonBody(req, MAX_BODY_BYTES),
    };
    // A refused operation is the caller's error; any other failure is Redis's (failClosed: 503).
    const answer = await failClosed(
      route.handle(call).catch((err) => {
        if (!(err instanceof OperationRefused)) throw err;
        throw new ApiError(err.status, 'invalid_request_error', err.message, { 400: 'invalid_value', 404: 'not_found', 409: 'conflict' }[err.status]);
      }),
    );
    if (answer !== undefined) sendJson(res, 200, answer);
    return;
  }
  throw routeNotFound(method, path);
}
