// Throughput of the client APIs that map onto chat (Anthropic's Messages,
// OpenAI's Responses) against chat completions itself, on one Parley in
// front of the same fast scripted upstream (256-token replies, whole or
// streamed), autocannon with 32 connections. The APIs take turns, in the
// reverse order every other round; each ratio is the median of the
// same-round ratios.
//
//   npm run build && node bench/client-apis.mjs [seconds per run, default 10] [rounds, default 3]
import { apiLoad, benchModel, forked, median, startParley, stopAll, WARMUP_SECONDS } from './support.mjs';

const SECONDS = Number(process.argv[2] ?? 10);
const ROUNDS = Number(process.argv[3] ?? 3);

try {
  const { port } = await forked('bench/fast-upstream.mjs', ['0']);
  const parley = await startParley([benchModel(`http://127.0.0.1:${port}`)]);
  const headers = { authorization: `Bearer ${parley.key}` };
  const base = `${parley.url}/v1`;
  const rows = [];
  for (const shape of ['whole', 'streamed']) {
    const apis = [['chat', shape], ['messages', `messages ${shape}`], ['responses', `responses ${shape}`]];
    for (const [, mode] of apis) await apiLoad(base, headers, mode, 32, WARMUP_SECONDS);
    const ratios = { messages: [], responses: [] };
    const rates = { chat: [], messages: [], responses: [] };
    for (let round = 0; round < ROUNDS; round++) {
      const reqs = {};
      for (const [api, mode] of round % 2 ? [...apis].reverse() : apis) {
        const r = await apiLoad(base, headers, mode, 32, SECONDS);
        if (r.non2xx || r.errors) throw new Error(`${mode}: ${r.non2xx} non-2xx, ${r.errors} errors`);
        reqs[api] = r.requests.average;
        rates[api].push(Math.round(r.requests.average));
      }
      ratios.messages.push(reqs.messages / reqs.chat);
      ratios.responses.push(reqs.responses / reqs.chat);
    }
    rows.push({
      shape,
      'chat req/s': median(rates.chat), 'messages req/s': median(rates.messages), 'responses req/s': median(rates.responses),
      'messages / chat': median(ratios.messages).toFixed(2), 'responses / chat': median(ratios.responses).toFixed(2),
      'rounds (messages, responses)': ratios.messages.map((m, i) => `${m.toFixed(2)}/${ratios.responses[i].toFixed(2)}`).join(' '),
    });
  }
  console.table(rows);
} finally {
  stopAll();
}
