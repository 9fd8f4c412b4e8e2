// The reply side of the wire format: the shapes every dialect normalizes to,
// and the two renderers built on them: one whole `chat.completion` object, or
// `chat.completion.chunk` server-sent events (SPEC 2.3, 6).
import { STREAM_BROKE_OFF_BODY, type ApiError } from './errors.js';

export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs: { token: string; logprob: number; bytes: number[] | null }[];
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  /** The part of prompt_tokens the upstream read from its prefix cache. */
  cached_tokens: number;
  /** The part of completion_tokens spent reasoning, where the upstream says. */
  reasoning_tokens?: number;
}

export interface AssistantMessage {
  role: 'assistant';
  content: string | null;
  /** The model's reasoning, under DeepSeek's name whatever the upstream called it. */
  reasoning_content?: string;
  tool_calls?: unknown[];
  refusal?: string | null;
}

/** A piece of a tool call, as OpenAI streams it: `id`, `type` and the name on its first piece only. */
export interface ToolCallFragment {
  index: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}

export interface Choice {
  index: number;
  message: AssistantMessage;
  logprobs: { content: TokenLogprob[] | null } | null;
  finish_reason: string | null;
  /** The stop string that ended the choice, where the upstream says which (Anthropic's clients are told; chat's are not). */
  matched_stop?: string;
}

export interface Completion {
  choices: Choice[];
  usage: Usage;
}

export interface ChoiceDelta {
  index: number;
  delta: { role?: 'assistant'; content?: string | null; reasoning_content?: string; tool_calls?: ToolCallFragment[]; refusal?: string | null };
  logprobs: { content: TokenLogprob[] | null } | null;
  finish_reason: string | null;
  matched_stop?: string;
}

/**
 * Pieces of text for one choice, one stream chunk each, in order: what a run
 * of plain content events comes to. Most of a stream is such runs; they keep
 * the upstream's text and are rewritten in one step, not piece by piece.
 */
export interface ContentRun {
  index: number;
  /** How many pieces; each has some text. */
  pieces: number;
  /** Every piece as a JSON string literal between `before` and `after`, all joined. */
  render(before: string, after: string): string;
}

/** What one upstream stream event (or run of plain content events) amounts to, whatever its dialect. */
export interface StreamEvent {
  choices?: ChoiceDelta[];
  content?: ContentRun;
  usage?: Usage;
  done?: true;
}

export interface ReplyIdentity {
  id: string;
  created: number;
  /** The model id the client asked for, never the upstream's name for it. */
  model: string;
  /** The service tier that serves the reply (billing/service-tier.ts). */
  serviceTier: string;
}

export function usageBody(u: Usage) {
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    prompt_tokens_details: { cached_tokens: u.cached_tokens },
    ...(u.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: u.reasoning_tokens } } : {}),
  };
}

export function renderCompletion(identity: ReplyIdentity, completion: Completion) {
  return {
    id: identity.id,
    object: 'chat.completion',
    created: identity.created,
    model: identity.model,
    service_tier: identity.serviceTier,
    choices: completion.choices.map(({ matched_stop: _stop, ...choice }) => choice),
    usage: usageBody(completion.usage),
  };
}

/**
 * What a client API's renderer of a streamed reply is: the text of its
 * server-sent events for each stage of the one event sequence every
 * generation produces (normalized by the upstream's dialect). The stream
 * relay (gateway/stream-relay.ts) writes what it returns, in order.
 */
export interface ReplyRenderer {
  /** What opens the stream, before any content ('' where the API opens nothing). */
  start(): string;
  /**
   * A run of plain content: the text that opens its block or choice ('' once open), and its pieces, kept apart
   * because the run is long and joining would copy it. Only a dialect's quick path makes runs, and it reads chat
   * chunks alone: a renderer of text completions never gets one, and has none.
   */
  content?(run: ContentRun): [opening: string, pieces: string];
  /** A batch of deltas ('' when there is nothing to send). */
  deltas(choices: ChoiceDelta[]): string;
  /** What closes a reply that finished, with its usage. */
  end(usage: Usage): string;
  /** Sent whenever the upstream has been silent for the keep-alive interval. */
  readonly keepAlive: string;
  /** The event that ends a stream which cannot finish: the upstream broke off (no `err`), or failed after keep-alives had begun. */
  failure(err?: ApiError): string;
}

export const SSE_DONE = 'data: [DONE]\n\n';
export const SSE_KEEP_ALIVE = ': keep-alive\n\n';
export const sseData = (json: string) => `data: ${json}\n\n`;

function onlyContent(delta: object): boolean {
  for (const key in delta) if (key !== 'content') return false;
  return true;
}

/**
 * What OpenAI's two streamed APIs (chat and text completions) share: chunks
 * that open with `prefix` (everything before `choices`), comment lines to
 * keep alive, the usage chunk last and only when asked for, then [DONE], and
 * the error event in its place when the reply cannot finish (SPEC 6).
 */
export abstract class OpenAiChunks implements ReplyRenderer {
  readonly keepAlive = SSE_KEEP_ALIVE;
  /** Every chunk's text after its `choices`. */
  protected readonly suffix: string;

  constructor(protected readonly prefix: string, private readonly includeUsage: boolean) {
    // OpenAI marks every content chunk with usage null when usage was asked for.
    this.suffix = includeUsage ? ',"usage":null}' : '}';
  }

  abstract deltas(choices: ChoiceDelta[]): string;

  start(): string {
    return '';
  }

  end(usage: Usage): string {
    if (!this.includeUsage) return SSE_DONE;
    return sseData(this.prefix + '[],"usage":' + JSON.stringify(usageBody(usage)) + '}') + SSE_DONE;
  }

  failure(err?: ApiError): string {
    return sseData(JSON.stringify(err ? err.toBody() : STREAM_BROKE_OFF_BODY));
  }
}

/**
 * Renders one reply's chunks. It owns the stream's invariants: every choice
 * opens with a delta carrying the role, and usage goes out at most once,
 * last, only when the client asked for it.
 */
export class ChunkRenderer extends OpenAiChunks {
  /** Per choice index, once the choice has opened, the text of a content chunk before its content literal. */
  private readonly contentHeads: string[] = [];
  /** The text of a content chunk after its literal. */
  private readonly contentTail: string;
  /** Tool calls already opened, by choice and tool index: their later pieces go without id, type and name. */
  private readonly toolCallsOpened = new Set<string>();

  constructor(identity: ReplyIdentity, includeUsage: boolean) {
    super(`{"id":${JSON.stringify(identity.id)},"object":"chat.completion.chunk","created":${identity.created},"model":${JSON.stringify(identity.model)},"service_tier":${JSON.stringify(identity.serviceTier)},"choices":`, includeUsage);
    this.contentTail = `},"logprobs":null,"finish_reason":null}]${this.suffix}\n\n`;
  }

  /**
   * The SSE text for a run of plain content, a chunk per piece: the choice's
   * opening chunk ('' once it has opened) and the run's chunks, kept apart
   * because the run is long and joining would copy it.
   */
  content(run: ContentRun): [opening: string, pieces: string] {
    const opening = this.open(run.index);
    return [opening, run.render(this.contentHeads[run.index], this.contentTail)];
  }

  /** The SSE text for a batch of deltas ('' when there is nothing to send). */
  deltas(choices: ChoiceDelta[]): string {
    let out = '';
    for (const c of choices) {
      out += this.open(c.index);
      const bare = c.logprobs === null && c.finish_reason === null;
      if (bare && typeof c.delta.content === 'string' && onlyContent(c.delta)) {
        // The common chunk, a piece of text, from text made once per choice. An empty piece says nothing: not sent.
        if (c.delta.content) out += this.contentHeads[c.index] + JSON.stringify(c.delta.content) + this.contentTail;
        continue;
      }
      // The role went out in the opening chunk, with the empty content OpenAI sends there; a delta left with
      // nothing once they are taken out (an upstream's own opening, most often) is not sent.
      const { role: _role, ...delta } = c.delta;
      // An empty piece of text says nothing either: not sent.
      if (delta.content === '') delete delta.content;
      if (delta.tool_calls) delta.tool_calls = delta.tool_calls.map((t) => this.toolCallPiece(c.index, t));
      const emptyDelta = Object.keys(delta).length === 0;
      if (bare && emptyDelta) continue;
      const { matched_stop: _stop, ...openAiChoice } = c;
      out += sseData(this.prefix + JSON.stringify([{ ...openAiChoice, delta }]) + this.suffix);
    }
    return out;
  }

  /** A tool call's piece as OpenAI sends it: some servers repeat the call's id, type and name on every piece. */
  private toolCallPiece(choice: number, piece: ToolCallFragment): ToolCallFragment {
    const key = `${choice}:${piece.index}`;
    if (!this.toolCallsOpened.has(key)) {
      this.toolCallsOpened.add(key);
      return piece;
    }
    const { id: _id, type: _type, function: fn, ...rest } = piece;
    return fn?.arguments !== undefined ? { ...rest, function: { arguments: fn.arguments } } : rest;
  }

  /** As OpenAI does: a choice opens with a chunk of its own carrying the role. '' once it has. */
  private open(index: number): string {
    if (this.contentHeads[index] !== undefined) return '';
    this.contentHeads[index] = `data: ${this.prefix}[{"index":${index},"delta":{"content":`;
    return sseData(`${this.prefix}[{"index":${index},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${this.suffix}`);
  }
}
