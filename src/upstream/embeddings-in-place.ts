// An OpenAI-shaped embeddings reply passed on without reading its vectors:
// most of its bytes are the vectors, and parsing them into numbers or
// strings to write them out again cost Parley most of the time of an
// embeddings request: `node bench/fast-paths.mjs embeddings-in-place` gave
// this path 1.77 times the requests/s of the full parse (2026-11-26, 16
// base64 vectors of 1,024 dimensions a reply). Only the ends are read: the usage
// the charge is made from, and the model id, which becomes the client's.
// Anything not in that shape (a reply whose vectors are not in the encoding
// the client asked for, one whose ends do not read as below) takes the
// dialect's full parse.

/** The reply as the client gets it: text before the vectors, the upstream's bytes of them, text after; and what to charge. */
export interface EmbeddingsInPlace {
  parts: (string | Buffer)[];
  promptTokens: number;
}

/** How far into each end of the reply its small fields are looked for: ids and the usage are short. */
const END_BYTES = 512;
const DATA_OPEN = Buffer.from('"data":[');
/**
 * The end of the data array: its last item's close, then a key that follows the array in an OpenAI-shaped reply.
 * Inside an item a float list may close before the item's other keys (`"embedding":[1,2],"object":…`), so the
 * array's close is the `}]` of the last such match in the tail, never the first `]`.
 */
const DATA_CLOSE = /\}\],"(?:model|usage|id|object|created)"/g;
const USAGE = /"usage":\{"prompt_tokens":(\d+)[^{}]*\}/;

export function embeddingsInPlace(body: Buffer, model: string, encoding: 'float' | 'base64'): EmbeddingsInPlace | undefined {
  const open = body.indexOf(DATA_OPEN);
  if (open < 0 || open > END_BYTES) return undefined;
  const first = body.toString('latin1', open, Math.min(body.length, open + 64));
  if (!new RegExp(`^"data":\\[\\{[^\\[{]*"embedding":${encoding === 'base64' ? '"' : '\\['}`).test(first)) return undefined;
  const tailStart = Math.max(open + DATA_OPEN.length, body.length - END_BYTES);
  const tail = body.toString('latin1', tailStart);
  const close = [...tail.matchAll(DATA_CLOSE)].at(-1);
  const usage = USAGE.exec(tail);
  if (!close || !usage) return undefined;
  const promptTokens = Number(usage[1]);
  const vectors = body.subarray(open + DATA_OPEN.length, tailStart + close.index + 1);
  return {
    parts: ['{"object":"list","data":[', vectors, `],"model":${JSON.stringify(model)},"usage":{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens}}}`],
    promptTokens,
  };
}
