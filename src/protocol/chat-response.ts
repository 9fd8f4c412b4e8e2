// The reply side of the wire format: the shapes every dialect normalizes to,
// and the two renderers built on them: one whole `chat.completion` object, or
// `chat.completion.chunk` server-sent events (SPEC 2.3, 6).

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
}

export interface AssistantMessage {
  role: 'assistant';
  content: string | null;
  tool_calls?: unknown[];
  refusal?: string | null;
}

export interface Choice {
  index: number;
  message: AssistantMessage;
  logprobs: { content: TokenLogprob[] | null } | null;
  finish_reason: string | null;
}

export interface Completion {
  choices: Choice[];
  usage: Usage;
}

export interface ChoiceDelta {
  index: number;
  delta: { role?: 'assistant'; content?: string | null; tool_calls?: unknown[]; refusal?: string | null };
  logprobs: { content: TokenLogprob[] | null } | null;
  finish_reason: string | null;
}

/** What one upstream stream event amounts to, whatever its dialect. */
export interface StreamEvent {
  choices?: ChoiceDelta[];
  usage?: Usage;
  done?: true;
}

export interface ReplyIdentity {
  id: string;
  created: number;
  /** The model id the client asked for, never the upstream's name for it. */
  model: string;
}

export function usageBody(u: Usage) {
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    prompt_tokens_details: { cached_tokens: u.cached_tokens },
  };
}

export function renderCompletion(identity: ReplyIdentity, completion: Completion) {
  return {
    id: identity.id,
    object: 'chat.completion',
    created: identity.created,
    model: identity.model,
    choices: completion.choices,
    usage: usageBody(completion.usage),
  };
}

export const SSE_DONE = 'data: [DONE]\n\n';
export const SSE_KEEP_ALIVE = ': keep-alive\n\n';
export const sseData = (json: string) => `data: ${json}\n\n`;

function onlyContent(delta: object): boolean {
  for (const key in delta) if (key !== 'content') return false;
  return true;
}

// What JSON.stringify would escape: a quote, a backslash, a control character, a surrogate.
const NEEDS_ESCAPING = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A JSON string literal; most pieces of text need no escaping, and quoting them is far cheaper than stringify. */
const jsonString = (text: string) => (NEEDS_ESCAPING.test(text) ? JSON.stringify(text) : `"${text}"`);

/**
 * Renders one reply's chunks. It owns the stream's invariants: every choice
 * opens with a delta carrying the role, and usage goes out at most once,
 * last, only when the client asked for it.
 */
export class ChunkRenderer {
  private readonly prefix: string;
  private readonly suffix: string;
  /** Per choice index, once the choice has opened, the text of a content chunk before its content literal. */
  private readonly contentHeads: string[] = [];
  /** The text of a content chunk after its literal. */
  private readonly contentTail: string;

  constructor(identity: ReplyIdentity, private readonly includeUsage: boolean) {
    this.prefix = `{"id":${JSON.stringify(identity.id)},"object":"chat.completion.chunk","created":${identity.created},"model":${JSON.stringify(identity.model)},"choices":`;
    // OpenAI marks every content chunk with usage null when usage was asked for.
    this.suffix = includeUsage ? ',"usage":null}' : '}';
    this.contentTail = `},"logprobs":null,"finish_reason":null}]${this.suffix}\n\n`;
  }

  /** The SSE text for a batch of deltas ('' when there is nothing to send). */
  deltas(choices: ChoiceDelta[]): string {
    let out = '';
    for (const c of choices) {
      out += this.open(c.index);
      const bare = c.logprobs === null && c.finish_reason === null;
      if (bare && typeof c.delta.content === 'string' && onlyContent(c.delta)) {
        // The common chunk, a piece of text, from text made once per choice. An empty piece says nothing: not sent.
        if (c.delta.content) out += this.contentHeads[c.index] + jsonString(c.delta.content) + this.contentTail;
        continue;
      }
      // The role went out in the opening chunk, with the empty content OpenAI sends there; a delta left with
      // nothing once they are taken out (an upstream's own opening, most often) is not sent.
      const { role: _role, ...delta } = c.delta;
      const emptyDelta = Object.keys(delta).length === 0;
      if (bare && (emptyDelta || (onlyContent(delta) && !delta.content))) continue;
      // The usual finishing chunk is written from text: stringifying it was 0.7% of a streamed request's main-thread time.
      const finishing = emptyDelta && c.logprobs === null && c.finish_reason !== null;
      const choice = finishing ? `[{"index":${c.index},"delta":{},"logprobs":null,"finish_reason":${jsonString(c.finish_reason!)}}]` : JSON.stringify([{ ...c, delta }]);
      out += sseData(this.prefix + choice + this.suffix);
    }
    return out;
  }

  /** As OpenAI does: a choice opens with a chunk of its own carrying the role. '' once it has. */
  private open(index: number): string {
    if (this.contentHeads[index] !== undefined) return '';
    this.contentHeads[index] = `data: ${this.prefix}[{"index":${index},"delta":{"content":`;
    return sseData(`${this.prefix}[{"index":${index},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${this.suffix}`);
  }

  /** The closing text of a reply that finished: the usage chunk if asked for, then [DONE]. */
  end(usage: Usage): string {
    if (!this.includeUsage) return SSE_DONE;
    return sseData(this.prefix + '[],"usage":' + JSON.stringify(usageBody(usage)) + '}') + SSE_DONE;
  }
}
