// What calling an upstream costs the calling process, per request, for the
// three HTTP clients Parley could use: undici's dispatch API (what
// src/upstream/client.ts uses), undici's request(), and Node's own http
// client with a keep-alive agent (what the bare http-proxy-3 pass-through
// uses). Each posts the same chat completion to the fast scripted upstream
// from 32 concurrent loops in this process and reads the body as latin1 text,
// as Parley reads an ASCII reply; CPU time is this process's, user and
// system, so the load is the client alone, with no gateway and no load
// generator beside it.
//
// The clients take turns for `rounds` rounds of `seconds` each, in an order
// that alternates between rounds; the table shows each one's median.
//
//   node bench/upstream-client-cost.mjs [stream|whole] [rounds, default 5] [seconds, default 4]
import http from 'node:http';
import { Agent, request } from 'undici';
import { forked, median, stopAll } from './support.mjs';

const [mode = 'stream', rounds = '5', seconds = '4'] = process.argv.slice(2);
const CONNECTIONS = 32;
// Far less code than a gateway: a few seconds compile it (support.mjs's WARMUP_SECONDS is a gateway's).
const CLIENT_WARMUP_SECONDS = 3;
const body = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'Say 256 tokens.' }], max_tokens: 256, stream: mode === 'stream' });
const headers = { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) };

const undiciAgent = new Agent({ keepAliveTimeout: 30_000, connections: 1024 });
const nodeAgent = new http.Agent({ keepAlive: true, maxSockets: 1024 });

/** Each client posts once and resolves to the length of the text it read. */
const clients = (origin) => ({
  'undici dispatch': () =>
    new Promise((resolve, reject) => {
      let text = '';
      undiciAgent.dispatch(
        { origin, path: '/v1/chat/completions', method: 'POST', headers, body },
        {
          onRequestStart() {},
          onResponseStart() {},
          onResponseData: (_controller, chunk) => (text += chunk.toString('latin1')),
          onResponseEnd: () => resolve(text.length),
          onResponseError: (_controller, err) => reject(err),
        },
      );
    }),
  'undici request()': async () => {
    const res = await request(`${origin}/v1/chat/completions`, { method: 'POST', headers, body, dispatcher: undiciAgent });
    let text = '';
    for await (const chunk of res.body) text += chunk.toString('latin1');
    return text.length;
  },
  'node:http': () =>
    new Promise((resolve, reject) => {
      const req = http.request(`${origin}/v1/chat/completions`, { method: 'POST', agent: nodeAgent, headers }, (res) => {
        let text = '';
        res.on('data', (chunk) => (text += chunk.toString('latin1')));
        res.on('end', () => resolve(text.length));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    }),
});

/** Requests and CPU µs per request of `post`, from CONNECTIONS loops for `duration` seconds. */
async function load(post, duration) {
  let requests = 0;
  const end = Date.now() + duration * 1000;
  const before = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (Date.now() < end) {
        await post();
        requests++;
      }
    }),
  );
  const cpu = process.cpuUsage(before);
  return { rps: requests / duration, micros: (cpu.user + cpu.system) / requests };
}

try {
  const upstream = await forked('bench/fast-upstream.mjs', ['0']);
  const targets = Object.entries(clients(`http://127.0.0.1:${upstream.port}`));
  for (const [, post] of targets) await load(post, CLIENT_WARMUP_SECONDS);
  const runs = new Map(targets.map(([name]) => [name, []]));
  for (let round = 0; round < Number(rounds); round++) {
    for (const [name, post] of round % 2 ? [...targets].reverse() : targets) runs.get(name).push(await load(post, Number(seconds)));
  }
  console.table(targets.map(([name]) => ({
    client: name,
    'CPU µs/request': Math.round(median(runs.get(name).map((r) => r.micros))),
    'req/s': Math.round(median(runs.get(name).map((r) => r.rps))),
  })));
} finally {
  stopAll();
}
