import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { choiceEdges } from '../../src/upstream/choice-edges.js';
import { DIALECTS } from '../../src/upstream/dialects/index.js';

const vllm = DIALECTS.vllm;

/** What the dialect's full parse makes of one `data: ...\n\n` event. */
const fullParse = (sse: string) => vllm.streamEvent({ event: undefined, data: sse.slice('data: '.length, -2) });

const chunk = (parts: { fingerprint?: string; index?: string; delta: string; logprobs?: string; finish: string; stop?: string; usage?: string }) =>
  `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1795509253,"model":"bench",${parts.fingerprint ?? ''}"choices":[{"index":${parts.index ?? '0'},"delta":{${parts.delta}},${parts.logprobs ?? '"logprobs":null,'}"finish_reason":${parts.finish}${parts.stop ?? ''}}]${parts.usage ?? ''}}\n\n`;

describe('the opening and finishing events of a choice', () => {
  it("reads vLLM's opening and finishing events, and OpenAI's, as the full parse does", () => {
    const events = [
      chunk({ delta: '"role":"assistant","content":""', finish: 'null' }),
      chunk({ delta: '"content":""', finish: '"length"', stop: ',"stop_reason":null' }),
      chunk({ fingerprint: '"system_fingerprint":"fp_1",', index: '2', delta: '"role":"assistant","content":null', finish: 'null', usage: ',"usage":null' }),
      chunk({ delta: '', logprobs: '', finish: '"stop"' }),
      chunk({ index: '10', delta: '"role":"assistant"', finish: '"tool_calls"' }),
      // vLLM since 0.10.2 (token ids, asked for or not), SGLang, and OpenAI with its service tier and padding.
      chunk({ delta: '"role":"assistant","content":""', finish: 'null', usage: ',"prompt_token_ids":null' }),
      chunk({ delta: '"content":""', finish: '"stop"', stop: ',"stop_reason":null,"token_ids":null' }),
      chunk({ delta: '"role":"assistant","content":""', finish: 'null', stop: ',"matched_stop":null' }),
      chunk({ fingerprint: '"service_tier":"default","system_fingerprint":null,', delta: '', finish: '"stop"', usage: ',"obfuscation":"3S9Rm"' }),
    ];
    for (const sse of events) {
      const read = choiceEdges.read(`: keep-alive\n\n${sse}data: [DONE]\n\n`, ': keep-alive\n\n'.length, true);
      expect(read).toEqual({ event: fullParse(sse), end: ': keep-alive\n\n'.length + sse.length });
    }
    expect(choiceEdges.read(events[1], 0, true)?.event).toEqual({ choices: [{ index: 0, delta: { content: '' }, logprobs: null, finish_reason: 'length' }] });
  });

  it('leaves every other event to the full parse', () => {
    const others = [
      chunk({ delta: '"content":" tok"', finish: 'null' }),
      chunk({ delta: '', finish: '"stop"', usage: ',"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}' }),
      chunk({ delta: '', finish: '"stop"', stop: ',"stop_reason":7' }),
      chunk({ delta: '', finish: '"stop"', stop: ',"token_ids":[5]' }),
      chunk({ delta: '', finish: '"stop"', stop: ',"matched_stop":2' }),
      chunk({ delta: '"role":"assistant","content":""', finish: 'null', usage: ',"prompt_token_ids":[1,2]' }),
      chunk({ delta: '', logprobs: '"logprobs":{"content":[]},', finish: '"stop"' }),
      chunk({ delta: '"role":"assistant","content":""', finish: 'null', index: '01' }),
      chunk({ delta: '"role":"user"', finish: 'null' }),
      chunk({ delta: '', finish: '"st\\u006fp"' }),
      chunk({ delta: '"role":"assistant","content":""', finish: 'null' }).replace('data: ', 'data:'),
      chunk({ delta: '"role":"assistant","content":""', finish: 'null' }).replace('\n\n', '\r\n\r\n'),
      chunk({ delta: '', finish: '"stop"' }).replace('"choices":[{', '"choices":[{"index":1},{'),
    ];
    for (const sse of others) expect(choiceEdges.read(sse, 0, true)).toBeUndefined();
  });

  it('never reads an event otherwise than the full parse would, whatever its framing', () => {
    const part = (...options: string[]) => fc.constantFrom(...options);
    const event = fc
      .record({
        fingerprint: part('', '"system_fingerprint":null,', '"system_fingerprint":"fp_1",', '"system_fingerprint":1,', '"service_tier":"default","system_fingerprint":null,', '"service_tier":{},'),
        index: part('0', '3', '00', '-1', '1.5'),
        delta: part('', '"role":"assistant"', '"role":"assistant","content":""', '"role":"assistant","content":null', '"content":""', '"content":"x"', '"role":"assistant","content":"x"', '"content":"","role":"assistant"'),
        logprobs: part('', '"logprobs":null,', '"logprobs":{},'),
        finish: part('null', '"stop"', '"length"', '"content_filter"', '""', '"Stop"', '7'),
        stop: part('', ',"stop_reason":null', ',"stop_reason":"x"', ',"token_ids":null', ',"stop_reason":null,"token_ids":null', ',"token_ids":null,"stop_reason":null', ',"token_ids":[1]', ',"matched_stop":null', ',"matched_stop":"x"'),
        usage: part('', ',"usage":null', ',"usage":{"prompt_tokens":1,"completion_tokens":2}', ',"prompt_token_ids":null', ',"usage":null,"prompt_token_ids":null', ',"prompt_token_ids":[1]',
          ',"obfuscation":"x","usage":null', ',"obfuscation":null'),
      })
      .map(chunk);
    fc.assert(
      fc.property(event, (sse) => {
        const read = choiceEdges.read(sse, 0, true);
        if (read) expect(read).toEqual({ event: fullParse(sse), end: sse.length });
      }),
      { numRuns: 2000 },
    );
  });
});
