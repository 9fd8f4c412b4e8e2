// Every API's request goes through one parse: a JSON object, checked by the
// API's zod schema, its text checked for valid Unicode; the first problem
// becomes the 400 OpenAI would send, its `param` naming the field as OpenAI
// writes it (`messages[0].role`).
import type { z } from 'zod';
import { invalidParameter, type ApiError } from './errors.js';
import { MAX_JSON_DEPTH, textProblemOf, type TextProblem } from './well-formed-text.js';

export function paramName(path: PropertyKey[]): string {
  return path.reduce<string>((name, key) => (typeof key === 'number' ? `${name}[${key}]` : name ? `${name}.${String(key)}` : String(key)), '');
}

/** The 400 for a request's text problem (well-formed-text.ts). */
export function textRefusal({ path, kind }: TextProblem): ApiError {
  const param = paramName(path);
  if (kind === 'too_deep') return invalidParameter(param, `Invalid value for '${param}': it is nested more than ${MAX_JSON_DEPTH} levels deep.`);
  return invalidParameter(param, `Invalid value for '${param}': the text is not valid Unicode (it holds a lone UTF-16 surrogate, such as \\ud800 without its pair). Send well-formed text.`);
}

/**
 * `body` as `schema`'s type, or the 400 for its first problem; `at`: where `body` is in the request, for a part of
 * one checked on its own (an element of a batch's requests: `['requests', 3]`).
 */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown, at: PropertyKey[] = []): T | ApiError {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return at.length === 0 ? invalidParameter(null, 'The request body must be a JSON object.') : invalidParameter(paramName(at), `Invalid value for '${paramName(at)}': expected an object.`);
  }
  const parsed = schema.safeParse(body);
  if (parsed.success) {
    const problem = textProblemOf(parsed.data);
    return problem ? textRefusal({ ...problem, path: [...at, ...problem.path] }) : parsed.data;
  }
  const issue = parsed.error.issues[0];
  const param = paramName([...at, ...issue.path]);
  const value = issue.path.reduce<unknown>((v, k) => (v as Record<PropertyKey, unknown> | undefined)?.[k], body);
  const message = value === undefined && issue.code === 'invalid_type' ? `Missing required parameter: '${param}'.` : `Invalid value for '${param}': ${issue.message}.`;
  return invalidParameter(param, message);
}
