import { describe, expect, it } from 'vitest';
import { embeddingsInPlace } from '../../src/upstream/embeddings-in-place.js';

const vector = Buffer.from(new Float32Array([1, 2, 3]).buffer).toString('base64');
const joined = (parts: (string | Buffer)[]) => Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p))).toString();

describe('an embeddings reply passed on in place', () => {
  it.each([
    ['vLLM', `{"id":"embd-1","object":"list","created":1,"model":"up","data":[{"index":0,"object":"embedding","embedding":"${vector}"}],"usage":{"prompt_tokens":9,"total_tokens":9,"completion_tokens":0,"prompt_tokens_details":null}}`],
    ['OpenAI', `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"${vector}"}],"model":"up","usage":{"prompt_tokens":9,"total_tokens":9}}`],
  ])("reads %s's order of fields: the vectors as they came, the client's model id, the usage", (_name, body) => {
    const read = embeddingsInPlace(Buffer.from(body), 'mine', 'base64')!;
    expect(read.promptTokens).toBe(9);
    expect(JSON.parse(joined(read.parts))).toEqual({ object: 'list', data: [JSON.parse(body).data[0]], model: 'mine', usage: { prompt_tokens: 9, total_tokens: 9 } });
  });

  it.each([
    ['floats where base64 was asked for', `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1,2]}],"model":"up","usage":{"prompt_tokens":9,"total_tokens":9}}`],
    ['no usage', `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"${vector}"}],"model":"up"}`],
    ['no data', '{"object":"error","message":"boom"}'],
  ])('leaves a reply with %s to the full parse', (_name, body) => {
    expect(embeddingsInPlace(Buffer.from(body), 'mine', 'base64')).toBeUndefined();
  });
});
