// A reply's text decoded token by token, with real llama.cpp tokenizers:
// Parley's own model always, and the shared fixtures (Llama-2 SentencePiece,
// Qwen2 byte-level BPE) when ../shared/models is present.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LlamaModel, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localLlama } from '../../src/engine/llama.js';
import { DEFAULT_MODEL_FILE, ensureDefaultModel } from '../../src/engine/model-maker.js';
import { ReplyText } from '../../src/engine/reply-text.js';
import { fixtureModelPaths } from '../support/fixture-models.js';

const dir = mkdtempSync(join(tmpdir(), 'parley-reply-text-'));
const ownModel = ensureDefaultModel(join(dir, DEFAULT_MODEL_FILE));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Words that start with spaces, punctuation after them, and characters of two, three and four UTF-8 bytes.
const TEXT = 'Hello world, the gateway streams tokens. Größe: 42 °C — 東京の天気は晴れ 🚀🎉 naïve café! Ünïcödé?\n  indented line\t tab';

/** Every token pushed in turn: the text after each, and how many tokens were decoded for it. */
function decodeOneByOne(model: LlamaModel, tokens: Token[]) {
  let decoded = 0;
  const reply = new ReplyText((t) => {
    decoded += t.length;
    return model.detokenize(t);
  });
  const texts: string[] = [];
  for (const token of tokens) {
    reply.push(token);
    texts.push(reply.text);
  }
  return { texts, end: reply.end(), decoded };
}

describe.each([ownModel, ...fixtureModelPaths])('ReplyText with %s', (path) => {
  let model: LlamaModel;
  beforeAll(async () => {
    model = await (await localLlama()).loadModel({ modelPath: path });
  });
  afterAll(() => model?.dispose());

  it('grows by whole characters to exactly the text the tokens decode to', () => {
    const tokens = model.tokenize(TEXT.repeat(3));
    const whole = model.detokenize(tokens);
    const { texts, end } = decodeOneByOne(model, tokens);
    expect(end).toBe(whole);
    for (const text of texts) {
      expect(whole.startsWith(text)).toBe(true);
      expect(text).not.toMatch(/\uFFFD$/);
    }
    expect(texts.at(-1)).toBe(whole);
  });

  it('ends as the whole decode does for any tokens, a character left unfinished included', () => {
    // Byte tokens in any order: UTF-8 that breaks off, resumes or never finishes.
    const vocabulary = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    let seed = 7;
    const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % vocabulary;
    const tokens = [...Array.from({ length: 400 }, random), ...model.tokenize('東')].map((t) => t as Token);
    for (const cut of [tokens.length, tokens.length - 1]) {
      expect(decodeOneByOne(model, tokens.slice(0, cut)).end).toBe(model.detokenize(tokens.slice(0, cut)));
    }
  });

  it('decodes a few tokens per token, however long the reply', () => {
    const tokens = model.tokenize(TEXT.repeat(40));
    expect(tokens.length).toBeGreaterThan(1000);
    const { decoded } = decodeOneByOne(model, tokens);
    // Decoding the whole reply at each token would be tokens² / 2.
    expect(decoded / tokens.length).toBeLessThan(16);
  });
});
