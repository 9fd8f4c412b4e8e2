// What Parley's JavaScript spends rewriting one streamed reply of the fast
// upstream (TOKENS content chunks), stage by stage, in one process with no
// network and no other load, so that a change to the rewrite can be
// measured to a few percent, where gateway-cpu.mjs sees it through the noise
// of a loaded VM:
//
//   decode     the body's bytes, as upstream/client.ts hands them on: ASCII
//              checked, and left undecoded
//   parse      the SSE parser with the dialect's quick path (runs of plain content,
//              read natively where the native reader is built)
//   normalize  the dialect's full parse of every other event
//   render     OpenAI's chunks, as the stream relay asks the ChunkRenderer for them
//   copy       the rendered text into bytes, as the socket write does (a rope
//              from the JavaScript reader is flattened first)
//
// The same reply through the gateway costs its main thread far more than the
// total: there the text is new to the caches at every request, and the write
// also goes through Node's HTTP response and the kernel.
//
// Each further argument is another built checkout, measured in the same run.
//
//   npm run build && node bench/stream-stages.mjs [checkout ...]
import { isAscii } from 'node:buffer';
import { join } from 'node:path';
import { STREAMED_REPLY, TOKENS } from './fast-replies.mjs';
import { median, ROOT } from './support.mjs';

const REPLIES_PER_ROUND = 20_000;
const ROUNDS = 5;
const STAGES = ['decode', 'parse', 'normalize', 'render', 'copy'];
const IDENTITY = { id: 'chatcmpl-q7VlvhK147wqv0KRmY8VUg', created: 1_795_509_253, model: 'bench' };

const bytes = Buffer.from(STREAMED_REPLY);
const out = Buffer.allocUnsafeSlow(4 * bytes.length);

async function stagesOf(root) {
  const { DIALECTS } = await import(join(root, 'dist/upstream/dialects/index.js'));
  const { ChunkRenderer } = await import(join(root, 'dist/protocol/chat-response.js'));
  const dialect = DIALECTS.vllm;
  return (spent) => {
    let t = process.hrtime.bigint();
    const lap = (stage) => {
      const now = process.hrtime.bigint();
      spent[stage] += Number(now - t);
      t = now;
    };
    const parser = dialect.streamParser();
    // As upstream/client.ts hands a read on: ASCII bytes as they are (a checkout from before decoded them, and took the text with its bytes).
    const takesBytes = parser.push.length === 1;
    const ascii = isAscii(bytes);
    const input = !ascii ? bytes.toString('utf8') : takesBytes ? bytes : bytes.toString('latin1');
    lap('decode');
    const read = takesBytes ? parser.push(input) : parser.push(input, bytes);
    lap('parse');
    const events = read.map((e) => ('data' in e ? dialect.streamEvent(e) : e));
    lap('normalize');
    const renderer = new ChunkRenderer(IDENTITY, false);
    const parts = [];
    for (const event of events) {
      if (event.content) parts.push(...renderer.content(event.content));
      if (event.choices) parts.push(renderer.deltas(event.choices));
    }
    parts.push(renderer.end({ prompt_tokens: 24, completion_tokens: TOKENS, cached_tokens: 16 }));
    lap('render');
    let at = 0;
    for (const part of parts) at += out.latin1Write(part, at);
    lap('copy');
    return at;
  };
}

/** Nanoseconds per stage over one round of a checkout's replies. */
function round(run) {
  const spent = Object.fromEntries(STAGES.map((s) => [s, 0]));
  for (let i = 0; i < REPLIES_PER_ROUND; i++) run.reply(spent);
  return spent;
}

const checkouts = [ROOT, ...process.argv.slice(2)];
const runs = [];
for (const root of checkouts) runs.push({ root, reply: await stagesOf(root), rounds: [] });
// Compiled first: each checkout's code warmed up by an unmeasured round.
for (const run of runs) round(run);
for (let r = 0; r < ROUNDS; r++) for (const run of runs) run.rounds.push(round(run));
/** µs per reply, the median round's, of what `spent` picks from a round's nanoseconds. */
const µsPerReply = (rounds, spent) => (median(rounds.map(spent)) / REPLIES_PER_ROUND / 1000).toFixed(1);
console.table(runs.map(({ root, rounds }) => {
  const row = { checkout: root };
  for (const stage of STAGES) row[`${stage} µs`] = µsPerReply(rounds, (r) => r[stage]);
  row['total µs per reply'] = µsPerReply(rounds, (r) => STAGES.reduce((sum, s) => sum + r[s], 0));
  return row;
}));
