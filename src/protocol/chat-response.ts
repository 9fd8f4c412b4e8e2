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
  tool_calls?: ToolCall[];
  refusal?: string | null;
}

/** A whole reply's tool call, as OpenAI writes it (an upstream may leave out the id). */
export interface ToolCall {
  id?: string;
  type: string;
  function: { name: string; arguments: string };
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

/** The id of a tool call its upstream sent without one: a client sends it back with the call's result. */
const toolCallId = (identity: ReplyIdentity, choice: number, index: number) => `call_${identity.id}_${choice}_${index}`;

export function renderCompletion(identity: ReplyIdentity, completion: Completion) {
  const withIds = <C extends Omit<Choice, 'matched_stop'>>(choice: C): C => {
    const calls = choice.message.tool_calls;
    if (!calls?.some((t) => t.id === undefined)) return choice;
    return { ...choice, message: { ...choice.message, tool_calls: calls.map((t, i) => ({ id: toolCallId(identity, choice.index, i), ...t })) } };
  };
  return {
    id: identity.id,
    object: 'chat.completion',
    created: identity.created,
    model: identity.model,
    service_tier: identity.serviceTier,
    choices: completion.choices.map(({ matched_stop: _stop, ...choice }) => withIds(choice)),
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
  /**
   * The choices begun, and those given a finish reason. One whose upstream ends without (a server's bug, or none
   * of its own) is given 'stop' at the end, as its whole reply is: OpenAI ends every choice with one, and the
   * SDK's stream reader throws for a choice without.
   */
  protected readonly begun = new Set<number>();
  private readonly finished = new Set<number>();

  constructor(protected readonly prefix: string, private readonly includeUsage: boolean) {
    // OpenAI marks every content chunk with usage null when usage was asked for.
    this.suffix = includeUsage ? ',"usage":null}' : '}';
  }

  abstract deltas(choices: ChoiceDelta[]): string;

  /** The `choices` of a chunk that only ends choice `index` with 'stop'. */
  protected abstract stopped(index: number): string;

  /** Notes that choice `c` has begun, and whether it has finished. */
  protected noteChoice(c: ChoiceDelta): void {
    this.begun.add(c.index);
    if (c.finish_reason !== null) this.finished.add(c.index);
  }

  start(): string {
    return '';
  }

  end(usage: Usage): string {
    let out = '';
    for (const index of this.begun) if (!this.finished.has(index)) out += sseData(this.prefix + this.stopped(index) + this.suffix);
    if (!this.includeUsage) return out + SSE_DONE;
    return out + sseData(this.prefix + '[],"usage":' + JSON.stringify(usageBody(usage)) + '}') + SSE_DONE;
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
  /**
   * Tool calls opened, by choice and the upstream's index, with the index each goes out under: OpenAI counts a
   * choice's calls from 0, and the SDK's stream reader fails on a gap, which a server may leave.
   */
  private readonly toolCallIndexes = new Map<string, number>();
  /** How many tool calls each choice has opened. */
  private readonly toolCallsOfChoice: number[] = [];
  /**
   * The index each of the upstream's choices goes out under: from 0, in the order they first come. OpenAI numbers
   * a reply's choices from 0, and the SDK's stream reader fails on a gap, which a server that numbers otherwise
   * leaves (a stream of choice 2 alone, for one reply). Choices are alike, so their order says nothing.
   */
  private readonly choiceIndexes = new Map<number, number>();

  constructor(private readonly identity: ReplyIdentity, includeUsage: boolean) {
    super(`{"id":${JSON.stringify(identity.id)},"object":"chat.completion.chunk","created":${identity.created},"model":${JSON.stringify(identity.model)},"service_tier":${JSON.stringify(identity.serviceTier)},"choices":`, includeUsage);
    this.contentTail = `},"logprobs":null,"finish_reason":null}]${this.suffix}\n\n`;
  }

  /**
   * The SSE text for a run of plain content, a chunk per piece: the choice's
   * opening chunk ('' once it has opened) and the run's chunks, kept apart
   * because the run is long and joining would copy it.
   */
  content(run: ContentRun): [opening: string, pieces: string] {
    const index = this.choiceOf(run.index);
    const opening = this.open(index);
    return [opening, run.render(this.contentHeads[index], this.contentTail)];
  }

  /** The SSE text for a batch of deltas ('' when there is nothing to send). */
  deltas(choices: ChoiceDelta[]): string {
    let out = '';
    for (const upstreamChoice of choices) {
      const index = this.choiceOf(upstreamChoice.index);
      const c = index === upstreamChoice.index ? upstreamChoice : { ...upstreamChoice, index };
      out += this.open(c.index);
      this.noteChoice(c);
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

  /**
   * A tool call's piece as OpenAI sends it: its first with the call's id, type and name (the SDK's stream reader
   * throws for a call without), where some servers leave them out, and the rest without, where some repeat them.
   */
  private toolCallPiece(choice: number, piece: ToolCallFragment): ToolCallFragment {
    const key = `${choice}:${piece.index}`;
    let index = this.toolCallIndexes.get(key);
    if (index === undefined) {
      index = this.toolCallsOfChoice[choice] ?? 0;
      this.toolCallsOfChoice[choice] = index + 1;
      this.toolCallIndexes.set(key, index);
      const { id = toolCallId(this.identity, choice, index), type = 'function', function: fn = {} } = piece;
      return { index, id, type, function: { ...fn, name: fn.name ?? '' } };
    }
    const args = piece.function?.arguments;
    return args !== undefined ? { index, function: { arguments: args } } : { index };
  }

  protected stopped(index: number): string {
    return `[{"index":${index},"delta":{},"logprobs":null,"finish_reason":"stop"}]`;
  }

  private choiceOf(upstreamIndex: number): number {
    let index = this.choiceIndexes.get(upstreamIndex);
    if (index === undefined) this.choiceIndexes.set(upstreamIndex, (index = this.choiceIndexes.size));
    return index;
  }

  /** As OpenAI does: a choice opens with a chunk of its own carrying the role. '' once it has. */
  private open(index: number): string {
    if (this.contentHeads[index] !== undefined) return '';
    this.begun.add(index);
    this.contentHeads[index] = `data: ${this.prefix}[{"index":${index},"delta":{"content":`;
    return sseData(`${this.prefix}[{"index":${index},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${this.suffix}`);
  }
}
