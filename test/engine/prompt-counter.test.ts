// The prompt counter's own thread: the same counts as the tokenizer on the
// caller's thread, and a queue that neither long prompts nor a flood of empty
// ones can grow past its bound.
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadCountingPrompt } from '../../src/engine/chat-prompt.js';
import { ensureDefaultModel } from '../../src/engine/model-maker.js';
import { PromptCounter } from '../../src/engine/prompt-counter.js';

let gguf: string;
beforeAll(() => {
  gguf = ensureDefaultModel(join(process.cwd(), '.parley-test', 'tokenizer.gguf'));
});

const conversation = [
  { role: 'system' as const, content: 'You are a coding agent.' },
  { role: 'user' as const, content: 'Voilà: 漢字とかな, "quotes" and a tab\t. '.repeat(50) },
  { role: 'assistant' as const, content: 'function double(x) { return x * 2; }' },
];

describe('the prompt counter', () => {
  it('counts on its thread what the tokenizer counts on the caller\'s', async () => {
    const counter = await PromptCounter.load(gguf);
    const here = await loadCountingPrompt(gguf);
    expect(counter.maxTokenBytes).toBe(here.maxTokenBytes);
    const bytes = conversation.reduce((sum, m) => sum + Buffer.byteLength(m.content), 0);
    expect(await counter.count(conversation, bytes)).toBe(here.count(conversation));
  });

  it('answers at once, uncounted, past 512 KiB queued, where each count weighs 1 KiB beside its text: a flood of empty prompts too', async () => {
    const counter = await PromptCounter.load(gguf);
    const answers = await Promise.all(Array.from({ length: 600 }, () => counter.count([{ role: 'user', content: '' }], 0)));
    const counted = answers.filter((a) => a !== undefined);
    // Answers come back while the rest are still being sent only after this turn: all 600 were asked in one.
    expect(counted.length).toBe(512);
    expect(answers.slice(512).every((a) => a === undefined)).toBe(true);
    // Once answered, the queue is empty again.
    expect(await counter.count(conversation, 1000)).toBeGreaterThan(0);
  });
});
