// A scripted upstream with an engine-like prefix cache, as vLLM's and
// SGLang's are: a prompt's tokens (its words, each message's role a token
// of its own) in blocks of 16, each block keyed by its whole prefix, so a
// block is reused only after the same tokens from the very start. A prompt's
// cached tokens are its leading blocks found in the cache (never its last
// token: an engine computes that one anyway). The cache holds CAPACITY
// blocks; the least recently used go first, and of one prompt's blocks the
// tail before the head, as vLLM frees them. It answers after a prefill time
// that grows with the uncached tokens, so that cache hits show in the wall
// time too. Its replies say its port, so that a client sees who served it.
//
//   node bench/block-cache-upstream.mjs PORT CAPACITY_IN_BLOCKS
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';

export const BLOCK_TOKENS = 16;

/** A request's prompt as the upstream counts it. */
export const promptTokens = (messages) => messages.flatMap((m) => [`<${m.role}>`, ...String(m.content).split(/\s+/).filter(Boolean)]);

/** The keys of a prompt's full blocks, each covering every token before it too. */
export function blockKeys(tokens) {
  const keys = [];
  let chain = '';
  for (let end = BLOCK_TOKENS; end <= tokens.length; end += BLOCK_TOKENS) {
    chain = createHash('sha1').update(chain).update(tokens.slice(end - BLOCK_TOKENS, end).join(' ')).digest('base64');
    keys.push(chain);
  }
  return keys;
}

export class BlockCache {
  /** In least recently used order: a Map keeps insertion order, and a block used again is moved to its end. */
  blocks = new Map();

  constructor(capacity) {
    this.capacity = capacity;
  }

  /** Serves a prompt: returns its cached tokens and keeps its blocks, as the most recently used. */
  serve(tokens) {
    const keys = blockKeys(tokens);
    let hits = 0;
    while (hits < keys.length && this.blocks.has(keys[hits])) hits++;
    // Tail first, so that the head is the most recent and is evicted last.
    for (const key of [...keys].reverse()) {
      this.blocks.delete(key);
      this.blocks.set(key, true);
    }
    while (this.blocks.size > this.capacity) this.blocks.delete(this.blocks.keys().next().value);
    return Math.min(hits * BLOCK_TOKENS, Math.floor((tokens.length - 1) / BLOCK_TOKENS) * BLOCK_TOKENS);
  }
}

const MS_PER_UNCACHED_TOKEN = 0.01;
const MS_PER_REQUEST = 8;

if (process.argv[1] === new URL(import.meta.url).pathname) {
  const port = Number(process.argv[2] ?? 0);
  const cache = new BlockCache(Number(process.argv[3] ?? 1024));
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      const tokens = promptTokens(JSON.parse(body).messages);
      const cached = cache.serve(tokens);
      await new Promise((r) => setTimeout(r, MS_PER_REQUEST + (tokens.length - cached) * MS_PER_UNCACHED_TOKEN));
      const usage = { prompt_tokens: tokens.length, completion_tokens: 1, total_tokens: tokens.length + 1, prompt_tokens_details: { cached_tokens: cached } };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 1, model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: String(server.address().port) }, finish_reason: 'stop' }], usage }));
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(port, '127.0.0.1', () => process.send?.({ port: server.address().port }));
}
