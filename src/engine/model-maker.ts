// Parley's own model: a llama-architecture GGUF with seeded random weights, a
// byte-level BPE vocabulary and a ChatML chat template. Its replies are
// gibberish, but llama.cpp loads and runs it exactly as it would a trained
// model, so the whole serving path (tokenizer, template, sampling, KV cache)
// is real. Same seed, same bytes.
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { encodeGguf, type GgufTensor, type GgufValue } from './gguf-writer.js';

export const DEFAULT_MODEL_CONTEXT = 65536;
// The window is in the file's metadata, so a new window is a new file.
export const DEFAULT_MODEL_FILE = `parley-tiny-chatml-${DEFAULT_MODEL_CONTEXT / 1024}k.gguf`;

const SHAPE = { hidden: 64, layers: 2, heads: 4, kvHeads: 2, feedForward: 128, context: DEFAULT_MODEL_CONTEXT };
const SEED = 20261122;

// Frequent English words become single tokens, so token counts look like a
// real tokenizer's rather than one token per byte.
const WORDS = (
  'the be to of and a in that have it for not on with he as you do at this but his by from they we say her she or ' +
  'an will my one all would there their what so up out if about who get which go me when make can like time no just ' +
  'him know take people into year your good some could them see other than then now look only come its over think ' +
  'also back after use two how our work first well way even new want because any these give day most us is are was ' +
  'hello world model token cache prompt reply assistant user system answer question gateway parley stream'
).split(' ');

const CHATML_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}" +
  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** GPT-2's reversible map from bytes to printable characters, used by byte-level BPE vocabularies. */
function byteToUnicode(): string[] {
  const printable = new Set<number>();
  for (let b = 33; b <= 126; b++) printable.add(b);
  for (let b = 161; b <= 172; b++) printable.add(b);
  for (let b = 174; b <= 255; b++) printable.add(b);
  const map: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(printable.has(b) ? b : next++);
  return map;
}

interface Vocabulary {
  tokens: string[];
  types: number[];
  merges: string[];
  eos: number;
  bos: number;
}

function buildVocabulary(): Vocabulary {
  const bytes = byteToUnicode();
  const tokens = [...bytes];
  const known = new Set(tokens);
  const merges: string[] = [];
  for (const word of WORDS) {
    for (const form of [word, ' ' + word]) {
      const chars = [...Buffer.from(form, 'utf8')].map((b) => bytes[b]);
      let left = chars[0];
      for (const right of chars.slice(1)) {
        const merged = left + right;
        if (!known.has(merged)) {
          known.add(merged);
          tokens.push(merged);
          merges.push(`${left} ${right}`);
        }
        left = merged;
      }
    }
  }
  const types = tokens.map(() => 1);
  const specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
  for (const s of specials) {
    tokens.push(s);
    types.push(3);
  }
  return { tokens, types, merges, bos: tokens.indexOf('<|endoftext|>'), eos: tokens.indexOf('<|im_end|>') };
}

/** mulberry32 feeding Box-Muller: a small deterministic normal generator. */
function normalGenerator(seed: number): () => number {
  let state = seed >>> 0;
  const uniform = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 1) / 4294967297;
  };
  return () => Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
}

export function buildDefaultModel(): Buffer {
  const vocab = buildVocabulary();
  const { hidden, layers, heads, kvHeads, feedForward, context } = SHAPE;
  const headDim = hidden / heads;
  const normal = normalGenerator(SEED);
  // Scaled so that logits spread enough for sampling settings to matter.
  const matrix = (cols: number, rows: number, scale = 0.08): Float32Array => {
    const m = new Float32Array(cols * rows);
    for (let i = 0; i < m.length; i++) m[i] = normal() * scale;
    return m;
  };
  const ones = (n: number) => new Float32Array(n).fill(1);

  const tensors: GgufTensor[] = [
    { name: 'token_embd.weight', shape: [hidden, vocab.tokens.length], data: matrix(hidden, vocab.tokens.length, 0.5) },
    { name: 'output_norm.weight', shape: [hidden], data: ones(hidden) },
    // An untied output matrix: with tied embeddings every token would predict itself.
    { name: 'output.weight', shape: [hidden, vocab.tokens.length], data: matrix(hidden, vocab.tokens.length, 0.3) },
  ];
  for (let i = 0; i < layers; i++) {
    const b = `blk.${i}.`;
    tensors.push(
      { name: b + 'attn_norm.weight', shape: [hidden], data: ones(hidden) },
      { name: b + 'attn_q.weight', shape: [hidden, hidden], data: matrix(hidden, hidden) },
      { name: b + 'attn_k.weight', shape: [hidden, kvHeads * headDim], data: matrix(hidden, kvHeads * headDim) },
      { name: b + 'attn_v.weight', shape: [hidden, kvHeads * headDim], data: matrix(hidden, kvHeads * headDim) },
      { name: b + 'attn_output.weight', shape: [hidden, hidden], data: matrix(hidden, hidden) },
      { name: b + 'ffn_norm.weight', shape: [hidden], data: ones(hidden) },
      { name: b + 'ffn_gate.weight', shape: [hidden, feedForward], data: matrix(hidden, feedForward) },
      { name: b + 'ffn_up.weight', shape: [hidden, feedForward], data: matrix(hidden, feedForward) },
      { name: b + 'ffn_down.weight', shape: [feedForward, hidden], data: matrix(feedForward, hidden) },
    );
  }

  const metadata: Record<string, GgufValue> = {
    'general.architecture': { type: 'string', value: 'llama' },
    'general.name': { type: 'string', value: 'parley-tiny-chatml (random weights)' },
    'general.file_type': { type: 'u32', value: 0 },
    'llama.context_length': { type: 'u32', value: context },
    'llama.embedding_length': { type: 'u32', value: hidden },
    'llama.block_count': { type: 'u32', value: layers },
    'llama.feed_forward_length': { type: 'u32', value: feedForward },
    'llama.attention.head_count': { type: 'u32', value: heads },
    'llama.attention.head_count_kv': { type: 'u32', value: kvHeads },
    'llama.attention.layer_norm_rms_epsilon': { type: 'f32', value: 1e-6 },
    'llama.rope.freq_base': { type: 'f32', value: 10000 },
    'llama.rope.dimension_count': { type: 'u32', value: headDim },
    'llama.vocab_size': { type: 'u32', value: vocab.tokens.length },
    'tokenizer.ggml.model': { type: 'string', value: 'gpt2' },
    'tokenizer.ggml.pre': { type: 'string', value: 'gpt-2' },
    'tokenizer.ggml.tokens': { type: 'string[]', value: vocab.tokens },
    'tokenizer.ggml.token_type': { type: 'i32[]', value: vocab.types },
    'tokenizer.ggml.merges': { type: 'string[]', value: vocab.merges },
    'tokenizer.ggml.bos_token_id': { type: 'u32', value: vocab.bos },
    'tokenizer.ggml.eos_token_id': { type: 'u32', value: vocab.eos },
    'tokenizer.ggml.padding_token_id': { type: 'u32', value: vocab.bos },
    'tokenizer.ggml.add_bos_token': { type: 'bool', value: false },
    'tokenizer.chat_template': { type: 'string', value: CHATML_TEMPLATE },
  };
  return encodeGguf(metadata, tensors);
}

/** Writes the default model to `path` unless it is already there; returns the path. */
export function ensureDefaultModel(path: string): string {
  if (existsSync(path)) return path;
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, buildDefaultModel());
  renameSync(tmp, path);
  return path;
}
