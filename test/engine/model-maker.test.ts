import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { buildDefaultModel } from '../../src/engine/model-maker.js';

describe("Parley's own model", () => {
  it('is the same bytes every time', () => {
    const hash = () => createHash('sha256').update(buildDefaultModel()).digest('hex');
    expect(hash()).toBe(hash());
  });

  it('is a GGUF version 3 file with a ChatML template', () => {
    const file = buildDefaultModel();
    expect(file.subarray(0, 4).toString('ascii')).toBe('GGUF');
    expect(file.readUInt32LE(4)).toBe(3);
    expect(file.includes(Buffer.from('<|im_start|>'))).toBe(true);
    expect(file.includes(Buffer.from('tokenizer.chat_template'))).toBe(true);
  });
});
