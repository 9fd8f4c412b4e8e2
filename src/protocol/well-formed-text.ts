// Text that is not valid Unicode: a lone UTF-16 surrogate ("\ud800" with no
// partner), which JSON can carry but UTF-8 cannot. Sent on, an upstream
// either rejects the whole body (OpenAI, DeepSeek: "not valid JSON") or
// fails on it with a 5xx (llama.cpp's server), so Parley refuses it at its
// edge, naming the field, before any upstream call or charge.

/**
 * The path of the first string, or object key, in `value` that is not
 * well-formed; undefined if every one is. The path is built on the way back
 * out, so that a well-formed request (nearly all) allocates none.
 */
export function illFormedTextPath(value: unknown): PropertyKey[] | undefined {
  if (typeof value === 'string') return value.isWellFormed() ? undefined : [];
  if (typeof value !== 'object' || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = illFormedTextPath(value[i]);
      if (found) return [i, ...found];
    }
    return undefined;
  }
  for (const key of Object.keys(value)) {
    if (!key.isWellFormed()) return [key];
    const found = illFormedTextPath((value as Record<string, unknown>)[key]);
    if (found) return [key, ...found];
  }
  return undefined;
}
