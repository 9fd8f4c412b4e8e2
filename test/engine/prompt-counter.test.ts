// The prompt counter's own threads: the same counts as the tokenizer on the
// caller's thread, short prompts apart from long ones, and queues that
// neither long prompts nor a flood of empty ones can grow past their bounds.
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
  it('counts on its threads what the tokenizer counts on the caller\'s', async () => {
    const counter = await PromptCounter.load(gguf);
    const here = await loadCountingPrompt(gguf);
    expect(counter.maxTokenBytes).toBe(here.maxTokenBytes);
    const bytes = conversation.reduce((sum, m) => sum + Buffer.byteLength(m.content), 0);
    expect(await counter.count(conversation, bytes)).toBe(here.count(conversation));
  });

  it('answers at once, uncounted, past 64 KiB of short prompts queued, where each count weighs 1 KiB beside its text: a flood of empty prompts too', async () => {
    const counter = await PromptCounter.load(gguf);
    const answers = await Promise.all(Array.from({ length: 100 }, () => counter.count([{ role: 'user', content: '' }], 0)));
    // All 100 were asked for in one turn, before any answer could come back.
    expect(answers.filter((a) => a !== undefined).length).toBe(64);
    expect(answers.slice(64).every((a) => a === undefined)).toBe(true);
    // Once answered, the queue is empty again.
    expect(await counter.count(conversation, 1000)).toBeGreaterThan(0);
  });

  it('counts a short prompt on a thread of its own, not behind a long one', async () => {
    const counter = await PromptCounter.load(gguf);
    const long = 'a'.repeat(120 * 1024);
    const order: string[] = [];
    await Promise.all([
      counter.count([{ role: 'user', content: long }], long.length).then((n) => order.push(`long ${n}`)),
      counter.count(conversation, 1000).then((n) => order.push(`short ${n}`)),
    ]);
    expect(order[0]).toMatch(/^short \d+$/);
    expect(order[1]).toMatch(/^long \d+$/);
  });
});
