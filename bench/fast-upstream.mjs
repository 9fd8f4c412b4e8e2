// A fast scripted OpenAI-compatible upstream for throughput benchmarks:
// every chat reply is 256 tokens, whole or streamed all at once, and every
// embeddings reply 16 vectors (fast-replies.mjs). A second argument delays
// each reply's first byte by that many ms, as a GPU's prefill would; a third
// spreads the delay evenly that many ms either side. A fixed delay keeps a
// closed-loop load in lockstep, so replies come back in bursts that queue on
// the gateway's event loop. At 16 connections and 20 ms, Parley's mean
// exceeded the direct upstream's by 6-7 ms fixed and by 1.3-1.6 ms spread
// 10 ms either side (2026-11-27): a GPU's timing varies, so spread it.
//
//   node bench/fast-upstream.mjs [port, default 0] [first byte ms, default 0] [spread ms, default 0]
import { createServer } from 'node:http';
import { EMBEDDINGS_REPLY, STREAMED_REPLY, WHOLE_REPLY } from './fast-replies.mjs';

const port = Number(process.argv[2] ?? 0);
const firstByteMs = Number(process.argv[3] ?? 0);
const spreadMs = Number(process.argv[4] ?? 0);
const delay = () => firstByteMs + spreadMs * (2 * Math.random() - 1);

const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => (firstByteMs > 0 ? setTimeout(reply, delay()) : reply()));
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
