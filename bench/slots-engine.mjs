// A scripted engine as a GPU server schedules: SLOTS sequences at once, the
// rest in a first-come queue, each streamed reply REPLY_MS long (its first
// token as soon as it has a slot). GET /metrics says what vLLM's does
// (vllm:num_requests_running, vllm:num_requests_waiting); GET / the most it
// ran and queued at once since it started.
//
//   node bench/slots-engine.mjs PORT SLOTS REPLY_MS
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 0);
const slots = Number(process.argv[3] ?? 8);
const replyMs = Number(process.argv[4] ?? 1000);
const PIECES = 10;

let running = 0;
const waiting = [];
let most = { running: 0, waiting: 0 };

function admit() {
  while (running < slots && waiting.length > 0) {
    running++;
    waiting.shift()();
  }
}

const chunk = (delta, finish = null) => `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;

const server = createServer((req, res) => {
  if (req.method === 'GET') {
    if (req.url === '/metrics') return res.end(`vllm:num_requests_running ${running}\nvllm:num_requests_waiting ${waiting.length}\n`);
    return res.end(JSON.stringify(most));
  }
  req.resume();
  req.on('end', async () => {
    await new Promise((resolve) => {
      waiting.push(resolve);
      admit();
      most.waiting = Math.max(most.waiting, waiting.length);
    });
    most.running = Math.max(most.running, running);
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(chunk({ role: 'assistant', content: '' }));
    for (let i = 0; i < PIECES && !res.destroyed; i++) {
      res.write(chunk({ content: 'tok ' }));
      await new Promise((r) => setTimeout(r, replyMs / PIECES));
    }
    res.write(chunk({}, 'stop'));
    res.write(`data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 1, model: 'x', choices: [], usage: { prompt_tokens: 100, completion_tokens: PIECES, total_tokens: 100 + PIECES } })}\n\n`);
    res.end('data: [DONE]\n\n');
    running--;
    admit();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => process.send?.({ port: server.address().port }));
