// Text that is not valid Unicode: a lone UTF-16 surrogate ("\ud800" with no
// partner), which JSON can carry but UTF-8 cannot. Sent on, an upstream
// either rejects the whole body (OpenAI, DeepSeek: "not valid JSON") or
// fails on it with a 5xx (llama.cpp's server), so Parley refuses it at its
// edge, naming the field, before any upstream call or charge.
//
// The same walk bounds how deep a request nests: JSON.parse takes any depth,
// but a walk (this one, JSON.stringify when the body is sent on) would run
// out of stack on 10,000 levels. No schema or tool definition needs more
// than MAX_JSON_DEPTH.

export const MAX_JSON_DEPTH = 128;

/** The first problem in a request's values: where it is, and whether it is text that is not well-formed or nesting past MAX_JSON_DEPTH. */
export interface TextProblem {
  path: PropertyKey[];
  kind: 'ill_formed' | 'too_deep';
}

/**
 * The first string, object key or value nested too deep in `value`;
 * undefined if there is none. The path is built on the way back out, so that
 * a well-formed request (nearly all) allocates none.
 */
export function textProblemOf(value: unknown, depth = 0): TextProblem | undefined {
  if (typeof value === 'string') return value.isWellFormed() ? undefined : { path: [], kind: 'ill_formed' };
  if (typeof value !== 'object' || value === null) return undefined;
  if (depth >= MAX_JSON_DEPTH) return { path: [], kind: 'too_deep' };
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = textProblemOf(value[i], depth + 1);
      if (found) return (found.path.unshift(i), found);
    }
    return undefined;
  }
  for (const key of Object.keys(value)) {
    if (!key.isWellFormed()) return { path: [key], kind: 'ill_formed' };
    const found = textProblemOf((value as Record<string, unknown>)[key], depth + 1);
    if (found) return (found.path.unshift(key), found);
  }
  return undefined;
}
