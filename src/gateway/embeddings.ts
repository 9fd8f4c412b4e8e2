// POST /v1/embeddings: what embeddings bring to the shared path
// (gateway/api-path.ts): OpenAI's embeddings schema, input held at the input
// price for its upper bound and charged what the upstream counted, and the
// vectors passed on as the upstream wrote them where they come in the
// encoding asked for. Never streamed.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import type { Usage } from '../protocol/chat-response.js';
import { embeddingInputs, parseEmbeddingsRequest, renderEmbeddings, type EmbeddingsRequest } from '../protocol/embeddings.js';
import { leadingTextKey, PLACEMENT_CHARS } from '../routing/affinity-key.js';
import { readBytes, readWhole } from '../upstream/client.js';
import { handleApiRequest, WrittenReply, type ApiDescriptor } from './api-path.js';
import type { GatewayContext } from './context.js';
import type { RequestRecord } from '../telemetry/request-record.js';

/** The most tokens the input can be: token ids are counted, text is bounded by its UTF-8 bytes (a byte-level tokenizer never makes more). */
function inputTokensBound(req: EmbeddingsRequest): number {
  return embeddingInputs(req).reduce((sum, input) => sum + (typeof input === 'string' ? Buffer.byteLength(input) + 2 : input.length), 0);
}

/** An embeddings reply as read: the client's body (written, or to write) and what the upstream counted. */
interface EmbeddingsWhole {
  reply: WrittenReply | object;
  usage: Usage;
}

export const embeddings: ApiDescriptor<EmbeddingsRequest, EmbeddingsWhole> = {
  name: 'embeddings',
  serves: 'embeddings',
  idPrefix: null,
  parse: parseEmbeddingsRequest,
  // No reply tokens: the hold is the input at the input price.
  common: (r) => ({ model: r.model, n: 0, stream: false, maxTokens: 0, user: r.user ?? undefined, serviceTier: r.service_tier }),
  promptTokens: (_model, r) => ({ tokens: [inputTokensBound(r)], exact: false }),
  affinityKey: (r) => {
    const first = embeddingInputs(r)[0];
    return leadingTextKey(typeof first === 'string' ? first : first.slice(0, PLACEMENT_CHARS).join(' '));
  },
  withMaxTokens: (r) => r,
  passThrough: () => ({}),
  upstreamRequest: (endpoint, _model, r) => ({ path: '/embeddings', bodies: [endpoint.dialect.embeddings.requestBody(r, endpoint.upstreamModel)] }),
  async readWhole(endpoint, body, r) {
    const encoding = r.encoding_format ?? 'float';
    const bytes = await readBytes(body);
    const inPlace = endpoint.dialect.embeddings.inPlace(bytes, r.model, encoding);
    if (inPlace) return { reply: new WrittenReply(inPlace.parts), usage: { prompt_tokens: inPlace.promptTokens, completion_tokens: 0, cached_tokens: 0 } };
    const read = await readWhole(bytes.toString('utf8'), (json) => endpoint.dialect.embeddings.whole(json));
    return { reply: renderEmbeddings(r.model, read, encoding), usage: { prompt_tokens: read.promptTokens, completion_tokens: 0, cached_tokens: 0 } };
  },
  // One call per request.
  mergeWhole: ([whole]) => whole,
  renderWhole: (_identity, whole) => whole.reply,
};

export function handleEmbeddings(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  return handleApiRequest(embeddings, req, res, ctx, span, record);
}
