// The order a batch's lines run in: lines sharing a prompt prefix (model,
// system prompt or instructions, the start of the first message or prompt)
// next to each other, each group where its first line stands.
import { describe, expect, it } from 'vitest';
import { cacheAwareOrder } from '../../src/batches/input-reading.js';

const chat = (system: string, question: string, model = 'm') => ({ customId: question, body: { model, messages: [{ role: 'system', content: system }, { role: 'user', content: question }] } });

describe('the order of a batch\'s lines', () => {
  it('groups lines by their shared prefix, keeping input order within each group and between groups', async () => {
    const lines = [chat('A', 'q0'), chat('B', 'q1'), chat('A', 'q2'), chat('B', 'q3'), chat('C', 'q4'), chat('A', 'q5'), chat('A', 'q6', 'other-model')];
    expect(await cacheAwareOrder(lines)).toEqual([0, 2, 5, 1, 3, 4, 6]);
  });

  it("groups Anthropic's system field, Responses' instructions and long prompts by their first 2,048 characters", async () => {
    const long = 'x'.repeat(3000);
    const lines = [
      { customId: 'a', body: { model: 'm', system: 'S', messages: [{ role: 'user', content: 'one' }] } },
      { customId: 'b', body: { model: 'm', prompt: `${long} first` } },
      { customId: 'c', body: { model: 'm', system: 'S', messages: [{ role: 'user', content: 'one' }, { role: 'assistant', content: 'two' }] } },
      { customId: 'd', body: { model: 'm', prompt: `${long} second` } },
      { customId: 'e', body: { model: 'm', instructions: 'I', input: 'hi' } },
    ];
    expect(await cacheAwareOrder(lines)).toEqual([0, 2, 1, 3, 4]);
  });
});
