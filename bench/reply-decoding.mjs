// What the local engine spends decoding a reply's text, per reply length:
// the whole reply decoded again at every token (how the engine did it until
// src/engine/reply-text.ts) against ReplyText's short window. On Parley's own
// model, or any GGUF given, with random non-special tokens. The engine runs
// llama.cpp and this decoding on one thread, so this time is taken from
// generation. (A long reply cannot be had from the engine itself on cue: the
// random model writes its end-of-generation token within a few hundred
// tokens, and node-llama-cpp ignores a logit bias on it.)
//
//   npm run build && node bench/reply-decoding.mjs [model.gguf]
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { localLlama } from '../dist/engine/llama.js';
import { DEFAULT_MODEL_FILE, ensureDefaultModel } from '../dist/engine/model-maker.js';
import { ReplyText } from '../dist/engine/reply-text.js';

const LENGTHS = [256, 1024, 4096];
const modelPath = process.argv[2] ?? ensureDefaultModel(join(mkdtempSync(join(tmpdir(), 'parley-bench-')), DEFAULT_MODEL_FILE));
const model = await (await localLlama()).loadModel({ modelPath });

/** `length` tokens the model could write: seeded, with no special tokens. */
function replyTokens(length) {
  const vocabulary = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const tokens = [];
  for (let seed = 1; tokens.length < length; seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) {
    const token = seed % vocabulary;
    if (!model.isSpecialToken(token)) tokens.push(token);
  }
  return tokens;
}

/** Milliseconds to decode `tokens` one at a time, as a reply is: the median of a few tries. */
function time(tokens, decodeEach) {
  const tries = [];
  for (let i = 0; i < 5; i++) {
    const started = performance.now();
    decodeEach(tokens);
    tries.push(performance.now() - started);
  }
  return tries.sort((a, b) => a - b)[2];
}

const wholeEachTime = (tokens) => {
  for (let n = 1; n <= tokens.length; n++) model.detokenize(tokens.slice(0, n));
};
const window = (tokens) => {
  const reply = new ReplyText((t) => model.detokenize(t));
  for (const token of tokens) reply.push(token);
  reply.end();
};

const rows = LENGTHS.map((length) => {
  const tokens = replyTokens(length);
  const whole = time(tokens, wholeEachTime);
  const short = time(tokens, window);
  return { 'reply tokens': length, 'whole reply each token ms': whole.toFixed(1), 'ReplyText ms': short.toFixed(2), 'ReplyText µs/token': ((short * 1000) / length).toFixed(1) };
});
console.table(rows);
await model.dispose();
