// A scripted upstream whose prompt cache holds only its K most recently
// used prompts, as a busy GPU's KV cache holds only a few long ones. A
// prompt's tokens are its words (the bench's prompts are words), and its
// cached tokens the longest prefix it shares with a prompt still in the
// cache. As in an engine's prefix cache (vLLM's blocks, SGLang's radix
// tree), a prompt that shares most of a cached one (the same system prompt,
// another question) takes that one's place rather than a second: two
// requests of one tenant do not push out another tenant's prompt. It answers
// after a prefill time that grows with the uncached tokens, so that cache
// hits show in the wall time too.
//
//   node bench/tight-cache-upstream.mjs PORT K
import { createServer } from 'node:http';

/** A request's prompt as the upstream counts it: one token per word of each message, its role included. */
export const promptTokens = (messages) => messages.flatMap((m) => [`<${m.role}>`, ...String(m.content).split(/\s+/).filter(Boolean)]);

export function sharedPrefix(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

const MS_PER_UNCACHED_TOKEN = 0.02;
const MS_PER_REQUEST = 8;

if (process.argv[1] === new URL(import.meta.url).pathname) {
  const port = Number(process.argv[2] ?? 0);
  const capacity = Number(process.argv[3] ?? 2);
  let cache = [];
  let served = 0;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      if (req.method === 'GET') return res.end(JSON.stringify({ served }));
      const { messages } = JSON.parse(body);
      const tokens = promptTokens(messages);
      const shared = cache.map((p) => sharedPrefix(p, tokens));
      const cached = Math.max(0, ...shared);
      const same = cache.findIndex((p, i) => shared[i] * 2 >= p.length);
      cache = [tokens, ...cache.filter((_, i) => i !== same)].slice(0, capacity);
      served++;
      await new Promise((r) => setTimeout(r, MS_PER_REQUEST + (tokens.length - cached) * MS_PER_UNCACHED_TOKEN));
      const usage = { prompt_tokens: tokens.length, completion_tokens: 1, total_tokens: tokens.length + 1, prompt_tokens_details: { cached_tokens: cached } };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 1, model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage }));
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(port, '127.0.0.1', () => process.send?.({ port: server.address().port }));
}
