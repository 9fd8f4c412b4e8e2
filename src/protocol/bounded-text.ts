// Client-supplied text repeated where its size is ours to pay for: log
// lines, metric labels, span attributes and error messages. A 3 MB model
// name must not make a 3 MB log line on every 404.

/** The most characters of a client's string that Parley repeats anywhere. */
export const MAX_ECHOED_CHARS = 256;

/** `text` cut to `max` characters, saying how much was cut. */
export function bounded(text: string, max = MAX_ECHOED_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max)}…(${text.length - max} more)`;
}
