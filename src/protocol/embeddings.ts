// OpenAI's Embeddings API: the request as a zod schema that is also its
// type, and the reply. Input is text, a list of texts, a list of token ids
// or a list of such lists; vectors go out as floats or base64 (little-endian
// float32), as the client asks.
import { z } from 'zod';
import type { ApiError } from './errors.js';
import { parseRequest, tokenIds } from './request-parsing.js';

const MAX_INPUTS = 2048;
const INPUT_SHAPES = `expected a non-empty string, an array of at most ${MAX_INPUTS} non-empty strings, an array of token ids, or an array of such arrays`;

export const embeddingsRequest = z.object({
  model: z.string().min(1),
  input: z.union([z.string().min(1), tokenIds, z.array(z.string().min(1)).min(1).max(MAX_INPUTS), z.array(tokenIds).min(1).max(MAX_INPUTS)], { error: INPUT_SHAPES }),
  encoding_format: z.enum(['float', 'base64']).nullish(),
  dimensions: z.int().min(1).nullish(),
  user: z.string().max(256).nullish(),
  service_tier: z.string().max(64).nullish(),
});

export type EmbeddingsRequest = z.infer<typeof embeddingsRequest>;

export function parseEmbeddingsRequest(body: unknown): EmbeddingsRequest | ApiError {
  return parseRequest(embeddingsRequest, body);
}

/** The inputs one by one: each a text or token ids. */
export function embeddingInputs(req: EmbeddingsRequest): (string | number[])[] {
  const input = req.input;
  if (typeof input === 'string') return [input];
  if (input.every((x) => typeof x === 'number')) return [input as number[]];
  return input as (string | number[])[];
}

/** One vector as the upstream gave it: floats, or base64 already. */
export interface Embedding {
  index: number;
  embedding: number[] | string;
}

export interface EmbeddingsReply {
  data: Embedding[];
  promptTokens: number;
}

/** A vector as little-endian float32, in base64: what OpenAI's `encoding_format: base64` sends. */
export function base64Vector(vector: number[]): string {
  return Buffer.from(new Float32Array(vector).buffer).toString('base64');
}

export function renderEmbeddings(model: string, reply: EmbeddingsReply, encoding: 'float' | 'base64') {
  return {
    object: 'list',
    data: reply.data.map((d) => ({
      object: 'embedding',
      index: d.index,
      embedding: encoding === 'base64' && Array.isArray(d.embedding) ? base64Vector(d.embedding) : d.embedding,
    })),
    model,
    usage: { prompt_tokens: reply.promptTokens, total_tokens: reply.promptTokens },
  };
}
