// POST /v1/completions: what text completions bring to the shared generation
// path (gateway/api-path.ts): the legacy schema, a prompt of raw text (the
// prefix, for routing), and `text_completion` replies and chunks.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import { passThroughFields } from '../protocol/chat-request.js';
import { parseCompletionRequest, promptsOf, renderTextCompletion, TextChunkRenderer, type CompletionRequest } from '../protocol/completions.js';
import { leadingTextKey, PLACEMENT_CHARS } from '../routing/affinity-key.js';
import { readStream, readWhole } from '../upstream/client.js';
import { mergeCompletions } from '../upstream/fan-out.js';
import type { GatewayContext } from './context.js';
import type { RequestRecord } from '../telemetry/request-record.js';
import { handleApiRequest, perChoiceBodies, type ApiDescriptor } from './api-path.js';

export const completions: ApiDescriptor<CompletionRequest> = {
  name: 'completions',
  serves: 'completions',
  idPrefix: 'cmpl-',
  parse: parseCompletionRequest,
  common: (r) => ({
    model: r.model,
    n: r.n ?? 1,
    stream: r.stream === true,
    // OpenAI's legacy default is 16 tokens, not the rest of the window.
    maxTokens: r.max_tokens ?? 16,
    user: r.user ?? undefined,
    serviceTier: r.service_tier,
  }),
  promptTokens(_model, request) {
    const prompts = promptsOf(request);
    // Without a tokenizer for raw text, its UTF-8 bytes bound its tokens (a byte-level tokenizer never makes more).
    const suffixBound = Buffer.byteLength(request.suffix ?? '') + 2;
    const tokens = prompts.map((p) => (typeof p === 'string' ? Buffer.byteLength(p) + suffixBound : p.length));
    return { tokens, exact: prompts.every((p) => typeof p !== 'string') };
  },
  // A batch routes by its first prompt.
  affinityKey: (r) => {
    const prompt = promptsOf(r)[0];
    return leadingTextKey(typeof prompt === 'string' ? prompt : prompt.slice(0, PLACEMENT_CHARS).join(' '));
  },
  cacheHint: (r) => r.prompt_cache_key,
  withMaxTokens: (r, maxTokens) => ({ ...r, max_tokens: maxTokens }),
  passThrough: (body, model) => passThroughFields(body, model.config.passThrough),
  upstreamRequest(endpoint, model, request, passThrough) {
    const target = { upstreamModel: endpoint.upstreamModel, supportsTools: false, supportsJsonOutput: model.config.supports.jsonOutput, passThrough };
    const bodies = promptsOf(request).flatMap((prompt) => perChoiceBodies(endpoint, endpoint.dialect.text.requestBody({ ...request, prompt }, target), request.n ?? 1, request.seed));
    return { path: '/completions', bodies };
  },
  readWhole: (endpoint, body) => readWhole(body, (json) => endpoint.dialect.text.whole(json)),
  mergeWhole: mergeCompletions,
  renderWhole: renderTextCompletion,
  streaming: { read: (endpoint, body) => readStream(endpoint.dialect.text, body), renderer: (identity, r) => new TextChunkRenderer(identity, r.stream_options?.include_usage === true) },
};

export function handleCompletion(req: IncomingMessage, res: ServerResponse, ctx: GatewayContext, span: Span, record: RequestRecord): Promise<void> {
  return handleApiRequest(completions, req, res, ctx, span, record);
}
