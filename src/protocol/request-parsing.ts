// Every API's request goes through one parse: a JSON object, checked by the
// API's zod schema, its text checked for valid Unicode; the first problem
// becomes the 400 OpenAI would send, its `param` naming the field as OpenAI
// writes it (`messages[0].role`).
import { z } from 'zod';
import { invalidParameter, type ApiError } from './errors.js';
import { MAX_JSON_DEPTH, textProblemOf, type TextProblem } from './well-formed-text.js';

/**
 * `schema`, for an object of at most `most` keys, or else `error`; counted first (a `logit_bias` of 300,000 keys took
 * its record's checks 0.8 s).
 */
export function fewKeys<T extends z.ZodType>(most: number, error: string, schema: T) {
  return z.custom((v) => typeof v !== 'object' || v === null || Object.keys(v).length <= most, { error }).pipe(schema);
}

/**
 * A non-empty array of token ids, each a whole number of 0 or more. Checked in one loop, not item by item by zod:
 * 2 million ids (4 MiB) took zod 190 to 250 ms.
 */
export const tokenIds = z.custom<number[]>((v) => Array.isArray(v) && v.length > 0 && v.every((x) => Number.isInteger(x) && x >= 0), { error: 'expected a non-empty array of token ids' });

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
 * Parses stop at the first problem, which is all a 400 tells (zod's `abortEarly`, which its own `validate` sets:
 * internal to zod 4.6, so test/protocol/large-fields.test.ts times it). Without it, every item of an array was checked
 * and made its issue: a `messages` of 2 million numbers held the main thread 5 to 7 s, `tools` of them 7.7 s, and
 * `tool_calls` of them threw (zod spread the issues into one call's arguments): a 500. A union tried each of its
 * shapes on every item: an embeddings input of a million one-letter strings took 2.6 s. A parse that succeeds does
 * the same work either way.
 */
const FIRST_PROBLEM_ONLY = { abortEarly: true } as z.core.ParseContext<z.core.$ZodIssue>;

/**
 * `body` as `schema`'s type, or the 400 for its first problem; `at`: where `body` is in the request, for a part of
 * one checked on its own (an element of a batch's requests: `['requests', 3]`).
 */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown, at: PropertyKey[] = []): T | ApiError {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return at.length === 0 ? invalidParameter(null, 'The request body must be a JSON object.') : invalidParameter(paramName(at), `Invalid value for '${paramName(at)}': expected an object.`);
  }
  const parsed = schema.safeParse(body, FIRST_PROBLEM_ONLY);
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
