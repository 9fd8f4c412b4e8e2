// Text that is not valid Unicode: a lone UTF-16 surrogate ("\ud800" with no
// partner), which JSON can carry but UTF-8 cannot. Sent on, an upstream
// either rejects the whole body (OpenAI, DeepSeek: "not valid JSON") or
// fails on it with a 5xx (llama.cpp's server), so Parley refuses it at its
// edge, naming the field, before any upstream call or charge.

/** The path of the first string, or object key, in `value` that is not well-formed; undefined if every one is. */
export function illFormedTextPath(value: unknown, path: PropertyKey[] = []): PropertyKey[] | undefined {
  if (typeof value === 'string') return value.isWellFormed() ? undefined : path;
  if (typeof value !== 'object' || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = illFormedTextPath(value[i], [...path, i]);
      if (found) return found;
    }
    return undefined;
  }
  for (const [key, inner] of Object.entries(value)) {
    if (!key.isWellFormed()) return [...path, key];
    const found = illFormedTextPath(inner, [...path, key]);
    if (found) return found;
  }
  return undefined;
}
