// A fast scripted OpenAI-compatible upstream for throughput benchmarks:
// every reply is 256 tokens, whole or as 256 content chunks sent at once.
import { createServer } from 'node:http';

const TOKENS = 256;
const port = Number(process.argv[2] ?? 0);
const usage = { prompt_tokens: 24, completion_tokens: TOKENS, total_tokens: 24 + TOKENS, prompt_tokens_details: { cached_tokens: 16 } };
const whole = JSON.stringify({
  id: 'up', object: 'chat.completion', created: 1, model: 'bench',
  choices: [{ index: 0, message: { role: 'assistant', content: ' tok'.repeat(TOKENS) }, finish_reason: 'length' }],
  usage,
});
const chunk = (choices, extra = {}) => `data: ${JSON.stringify({ id: 'up', object: 'chat.completion.chunk', created: 1, model: 'bench', choices, ...extra })}\n\n`;
const stream =
  chunk([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]) +
  Array.from({ length: TOKENS }, () => chunk([{ index: 0, delta: { content: ' tok' }, logprobs: null, finish_reason: null }])).join('') +
  chunk([{ index: 0, delta: {}, finish_reason: 'length' }]) +
  chunk([], { usage }) +
  'data: [DONE]\n\n';

const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    if (body.includes('"stream":true')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(stream);
    } else {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(whole) });
      res.end(whole);
    }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => process.send?.({ port: server.address().port }));
