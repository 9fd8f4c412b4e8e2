// The request bodies an OpenAI-compatible upstream takes for each API, from
// the request the client sent. What differs between upstreams here is named
// by their dialect's RequestQuirks.
import type { ChatCompletionRequest, OpenAiExtraField } from '../protocol/chat-request.js';
import type { CompletionRequest } from '../protocol/completions.js';
import type { EmbeddingsRequest } from '../protocol/embeddings.js';

export interface UpstreamTarget {
  upstreamModel: string;
  supportsTools: boolean;
  supportsJsonOutput: boolean;
  /** Engine extras the model's routing file passes through (its `passThrough`), as the client sent them. */
  passThrough: Record<string, unknown>;
}

export interface RequestQuirks {
  /** OpenAI takes `developer` and `max_completion_tokens`; most servers want `system` and `max_tokens`. */
  openAiNativeParams?: boolean;
  /** Which of OpenAI's further fields this upstream takes; the others are not sent to it. */
  understands?: readonly OpenAiExtraField[];
  /** Extra fields for a chat body. */
  extraBody?: (req: ChatCompletionRequest) => Record<string, unknown>;
}

type Body = Record<string, unknown>;

const CHAT_SAMPLING = ['temperature', 'top_p', 'stop', 'seed', 'n', 'presence_penalty', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs'] as const;
const CHAT_TOOLS = ['tools', 'tool_choice', 'parallel_tool_calls'] as const;
const TEXT_FIELDS = ['suffix', 'echo', 'logprobs', 'max_tokens', 'n', 'stop', 'temperature', 'top_p', 'seed', 'presence_penalty', 'frequency_penalty', 'logit_bias'] as const;

/** The fields of `from` named in `keys` that are set, copied onto `body`. */
function copySet<T extends object>(body: Body, from: T, keys: readonly (keyof T & string)[]): void {
  for (const key of keys) if (from[key] != null) body[key] = from[key];
}

/** A streaming call always asks for usage, so Parley can meter it. */
function streamed(body: Body, stream: boolean | null | undefined): void {
  if (!stream) return;
  body.stream = true;
  body.stream_options = { include_usage: true };
}

export function chatBody(req: ChatCompletionRequest, target: UpstreamTarget, quirks: RequestQuirks): Body {
  const native = quirks.openAiNativeParams ?? false;
  const maxTokens = req.max_completion_tokens ?? req.max_tokens;
  const body: Body = {
    model: target.upstreamModel,
    messages: native ? req.messages : req.messages.map((m) => (m.role === 'developer' ? { ...m, role: 'system' } : m)),
    ...(maxTokens != null ? { [native ? 'max_completion_tokens' : 'max_tokens']: maxTokens } : {}),
  };
  copySet(body, req, CHAT_SAMPLING);
  if (target.supportsTools) copySet(body, req, CHAT_TOOLS);
  if (target.supportsJsonOutput && req.response_format != null) body.response_format = req.response_format;
  copySet(body, req, quirks.understands ?? []);
  Object.assign(body, target.passThrough);
  streamed(body, req.stream);
  // Added in place: a spread copies the body again, slowly in V8 (Node 20), on every request.
  return Object.assign(body, quirks.extraBody?.(req));
}

export function textBody(req: CompletionRequest, target: UpstreamTarget, quirks: RequestQuirks): Body {
  const body: Body = { model: target.upstreamModel, prompt: req.prompt };
  copySet(body, req, TEXT_FIELDS);
  if (req.user != null && quirks.understands?.includes('user')) body.user = req.user;
  Object.assign(body, target.passThrough);
  streamed(body, req.stream);
  return body;
}

export function embeddingsBody(req: EmbeddingsRequest, upstreamModel: string, quirks: RequestQuirks): Body {
  const body: Body = { model: upstreamModel, input: req.input };
  copySet(body, req, ['encoding_format', 'dimensions']);
  if (req.user != null && quirks.understands?.includes('user')) body.user = req.user;
  return body;
}
