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

  // Every order of an item's fields the format allows, floats and base64, one item and two: the output is the
  // upstream's data as JSON reads it, never text that does not parse.
  const orders = [['index', 'object', 'embedding'], ['embedding', 'object', 'index'], ['object', 'embedding', 'index'], ['embedding', 'index', 'object']];
  const encodings = [['float', [0.5, -1.25, 3]], ['base64', vector]] as const;
  it.each(orders.flatMap((order) => encodings.map(([encoding, value]) => [order.join(','), encoding, value] as const)))('reads items whose fields come in the order %s, as %s', (order, encoding, value) => {
    const item = (index: number) => `{${order.split(',').map((field) => `"${field}":${JSON.stringify({ index, object: 'embedding', embedding: value }[field])}`).join(',')}}`;
    for (const count of [1, 2]) {
      const items = Array.from({ length: count }, (_, i) => item(i)).join(',');
      const body = `{"object":"list","data":[${items}],"model":"up","usage":{"prompt_tokens":9,"total_tokens":9}}`;
      const read = embeddingsInPlace(Buffer.from(body), 'mine', encoding);
      expect(read, body).toBeDefined();
      expect(JSON.parse(joined(read!.parts)).data).toEqual(JSON.parse(body).data);
    }
  });

  it.each([
    ['floats where base64 was asked for', `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1,2]}],"model":"up","usage":{"prompt_tokens":9,"total_tokens":9}}`],
    ['no usage', `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"${vector}"}],"model":"up"}`],
    ['no data', '{"object":"error","message":"boom"}'],
  ])('leaves a reply with %s to the full parse', (_name, body) => {
    expect(embeddingsInPlace(Buffer.from(body), 'mine', 'base64')).toBeUndefined();
  });
});
