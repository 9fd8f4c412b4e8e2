import { describe, expect, it } from 'vitest';
import { UpstreamBrokeOff } from '../../src/upstream/dialect.js';
import { DIALECTS } from '../../src/upstream/dialects/index.js';

const vllm = DIALECTS.vllm;
const event = (data: unknown) => ({ event: undefined, data: typeof data === 'string' ? data : JSON.stringify(data) });


describe('reading stream events', () => {
  const plain = { id: 'c-1', object: 'chat.completion.chunk', created: 5, model: 'x', choices: [{ index: 2, delta: { content: 'he said "hi"\n\u00e9' }, logprobs: null, finish_reason: null }] };

  it('reads a plain content chunk and the same chunk with its fields reordered alike', () => {
    const inOrder = vllm.streamEvent(event(plain));
    const reordered = vllm.streamEvent(event({ choices: [{ finish_reason: null, delta: { content: 'he said "hi"\n\u00e9' }, index: 2 }], model: 'x', id: 'c-1' }));
    expect(inOrder).toEqual({ choices: [{ index: 2, delta: { content: 'he said "hi"\n\u00e9' }, logprobs: null, finish_reason: null }] });
    expect(reordered).toEqual(inOrder);
  });

  it('reads content without escapes, raw unicode included, the same as JSON.parse would', () => {
    for (const content of [' tok', 'é 𝕏 日本', '', "it's < & >"]) {
      const e = vllm.streamEvent(event({ ...plain, choices: [{ ...plain.choices[0], delta: { content } }] }));
      expect(e.choices![0].delta.content).toBe(content);
    }
  });

  it('still refuses a plain-looking chunk whose content is not valid JSON', () => {
    const broken = JSON.stringify(plain).replace('\\n', '\\x');
    expect(() => vllm.streamEvent(event(broken))).toThrow(UpstreamBrokeOff);
  });

  it('reads usage and finish_reason from the full parse', () => {
    const e = vllm.streamEvent(event({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 9, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 4 } } }));
    expect(e.choices![0].finish_reason).toBe('stop');
    expect(e.usage).toEqual({ prompt_tokens: 9, completion_tokens: 3, cached_tokens: 4 });
  });

  it('never reports more cached tokens than prompt tokens', () => {
    const e = DIALECTS.deepseek.streamEvent(event({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, prompt_cache_hit_tokens: 50 } }));
    expect(e.usage!.cached_tokens).toBe(5);
  });

  it('refuses a chunk with a raw control character in its content, as JSON does', () => {
    const raw = `data: ${JSON.stringify(plain).replace('\\n', '\n')}\n\n`;
    const [e] = vllm.streamParser().push(raw);
    expect(() => vllm.streamEvent(e)).toThrow(UpstreamBrokeOff);
  });
});
