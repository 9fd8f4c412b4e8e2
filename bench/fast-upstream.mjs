// A fast scripted OpenAI-compatible upstream for throughput benchmarks:
// every chat reply is 256 tokens, whole or streamed all at once, and every
// embeddings reply 16 vectors (fast-replies.mjs). A second argument delays
// each reply's first byte by that many ms, as a GPU's prefill would.
//
//   node bench/fast-upstream.mjs [port, default 0] [first byte ms, default 0]
import { createServer } from 'node:http';
import { EMBEDDINGS_REPLY, STREAMED_REPLY, WHOLE_REPLY } from './fast-replies.mjs';

const port = Number(process.argv[2] ?? 0);
const firstByteMs = Number(process.argv[3] ?? 0);

const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => (firstByteMs > 0 ? setTimeout(reply, firstByteMs) : reply()));
  const reply = () => {
    if (req.url.endsWith('/embeddings')) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(EMBEDDINGS_REPLY) });
      res.end(EMBEDDINGS_REPLY);
    } else if (body.includes('"stream":true')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(STREAMED_REPLY);
    } else {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(WHOLE_REPLY) });
      res.end(WHOLE_REPLY);
    }
  };
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => process.send?.({ port: server.address().port }));
