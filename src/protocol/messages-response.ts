// Anthropic's Messages API reply: the whole `message` object, the stream of
// named events (message_start, content blocks opened, filled and closed,
// message_delta with the stop reason and usage, message_stop), and
// Anthropic's error body, each rendered from the one normalized reply.
import type { ChoiceDelta, Completion, ContentRun, ReplyIdentity, ToolCallFragment, Usage, ReplyRenderer } from './chat-response.js';
import type { ApiError, ErrorShape } from './errors.js';
import type { MessagesRequest } from './messages-request.js';

/** What stands in a thinking block's signature: Parley's upstreams sign nothing, and what comes back is dropped (messages-request.ts). */
const UNSIGNED = 'parley-unsigned';

const STOP_REASONS: Record<string, string> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use', function_call: 'tool_use', content_filter: 'refusal' };

/** Anthropic's stop reason, and the stop sequence when one of the request's ended the reply. */
function stopOf(finish: string | null, matched: string | undefined, stopSequences: string[] | undefined) {
  if (matched !== undefined && stopSequences?.includes(matched)) return { stop_reason: 'stop_sequence', stop_sequence: matched };
  return { stop_reason: STOP_REASONS[finish ?? 'stop'] ?? 'end_turn', stop_sequence: null };
}

/** Anthropic's ids for tool calls start `toolu_`; the upstream's own id follows, so a result sent back names the same call. */
const toolUseId = (id: string | undefined, fallback: string) => (id ? (id.startsWith('toolu_') ? id : `toolu_${id}`) : `toolu_${fallback}`);

/** Usage as Anthropic counts it: input_tokens leaves out what was read from cache. */
function usageOf(u: Usage) {
  return { input_tokens: u.prompt_tokens - u.cached_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens: u.cached_tokens, output_tokens: u.completion_tokens };
}

/** Anthropic's name for the tier that served a reply: flex, discounted and served after the rest, is its `batch`. */
const ANTHROPIC_TIERS: Record<string, string> = { default: 'standard', flex: 'batch', priority: 'priority' };

function toolInput(args: string | undefined): unknown {
  try {
    const input = JSON.parse(args || '{}');
    return input && typeof input === 'object' && !Array.isArray(input) ? input : { value: input };
  } catch {
    // A model that wrote broken JSON: the client still sees what it wrote.
    return { arguments: args };
  }
}

export function renderMessage(identity: ReplyIdentity, completion: Completion, req: MessagesRequest) {
  const { message, finish_reason, matched_stop } = completion.choices[0];
  const content: unknown[] = [];
  if (message.reasoning_content) content.push({ type: 'thinking', thinking: message.reasoning_content, signature: UNSIGNED });
  if (message.content) content.push({ type: 'text', text: message.content });
  for (const [i, call] of (message.tool_calls ?? []).entries()) {
    content.push({ type: 'tool_use', id: toolUseId(call.id, `${identity.id}_${i}`), name: call.function.name, input: toolInput(call.function.arguments) });
  }
  return {
    id: identity.id,
    type: 'message',
    role: 'assistant',
    model: identity.model,
    content,
    ...stopOf(finish_reason, matched_stop, req.stop_sequences),
    usage: { ...usageOf(completion.usage), service_tier: ANTHROPIC_TIERS[identity.serviceTier] },
  };
}

const event = (type: string, json: string) => `event: ${type}\ndata: ${json}\n\n`;

type BlockKind = 'text' | 'thinking' | 'tool_use';

/** One reply's named events. Blocks open and close in turn: at most one is open at a time. */
export class MessageEventRenderer implements ReplyRenderer {
  readonly keepAlive = event('ping', '{"type":"ping"}');
  /** The block open now; a tool call's arguments are gathered in `args` until it closes. */
  private open: { kind: BlockKind; index: number; toolIndex?: number; args?: string } | undefined;
  private blocks = 0;
  private finish: string | null = null;
  private matchedStop: string | undefined;

  constructor(private readonly identity: ReplyIdentity, private readonly countedPromptTokens: number, private readonly stopSequences: string[] | undefined) {}

  start(): string {
    const message = { id: this.identity.id, type: 'message', role: 'assistant', model: this.identity.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: this.countedPromptTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0, service_tier: ANTHROPIC_TIERS[this.identity.serviceTier] } };
    return event('message_start', JSON.stringify({ type: 'message_start', message }));
  }

  content(run: ContentRun): [opening: string, pieces: string] {
    const opening = this.ensure('text');
    const before = `event: content_block_delta\ndata: {"type":"content_block_delta","index":${this.open!.index},"delta":{"type":"text_delta","text":`;
    return [opening, run.render(before, '}}\n\n')];
  }

  deltas(choices: ChoiceDelta[]): string {
    let out = '';
    // Messages has one reply per request.
    for (const c of choices) {
      if (c.index !== 0) continue;
      const { reasoning_content: thinking, content: text, tool_calls: calls } = c.delta;
      if (thinking) out += this.ensure('thinking') + this.delta({ type: 'thinking_delta', thinking });
      if (text) out += this.ensure('text') + this.delta({ type: 'text_delta', text });
      for (const call of calls ?? []) out += this.toolPiece(call);
      if (c.finish_reason) {
        this.finish = c.finish_reason;
        this.matchedStop = c.matched_stop;
      }
    }
    return out;
  }

  end(usage: Usage): string {
    const delta = { type: 'message_delta', delta: stopOf(this.finish, this.matchedStop, this.stopSequences), usage: usageOf(usage) };
    return this.close() + event('message_delta', JSON.stringify(delta)) + event('message_stop', '{"type":"message_stop"}');
  }

  failure(err?: ApiError): string {
    const body = err ? anthropicErrorBody(err) : { type: 'error', error: { type: 'api_error', message: 'The model stopped answering before the reply was complete. Nothing was charged for this reply; please retry.' } };
    return event('error', JSON.stringify(body));
  }

  private toolPiece(call: ToolCallFragment): string {
    let out = '';
    if (this.open?.kind !== 'tool_use' || this.open.toolIndex !== call.index) {
      out += this.close();
      const index = this.blocks++;
      this.open = { kind: 'tool_use', index, toolIndex: call.index, args: '' };
      const block = { type: 'tool_use', id: toolUseId(call.id, `${this.identity.id}_${index}`), name: call.function?.name ?? '', input: {} };
      out += event('content_block_start', JSON.stringify({ type: 'content_block_start', index, content_block: block }));
    }
    this.open.args += call.function?.arguments ?? '';
    return out;
  }

  private delta(delta: object, index = this.open!.index): string {
    return event('content_block_delta', JSON.stringify({ type: 'content_block_delta', index, delta }));
  }

  /** Opens a block of `kind` unless one is open, closing the one before: '' when it is open already. */
  private ensure(kind: 'text' | 'thinking'): string {
    if (this.open?.kind === kind) return '';
    const closing = this.close();
    const index = this.blocks++;
    this.open = { kind, index };
    const block = kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' };
    return closing + event('content_block_start', JSON.stringify({ type: 'content_block_start', index, content_block: block }));
  }

  private close(): string {
    const open = this.open;
    if (!open) return '';
    this.open = undefined;
    let last = '';
    if (open.kind === 'thinking') last = this.delta({ type: 'signature_delta', signature: UNSIGNED }, open.index);
    // A call's input goes whole, as the whole reply's, once its arguments are all in: Anthropic's API sends a
    // tool's input as JSON it has checked (unless a client asks for fine-grained tool streaming, which Claude Code
    // does not), and its SDK's stream reader throws on arguments that are not JSON, which a model can write.
    if (open.kind === 'tool_use') last = this.delta({ type: 'input_json_delta', partial_json: JSON.stringify(toolInput(open.args)) }, open.index);
    return last + event('content_block_stop', JSON.stringify({ type: 'content_block_stop', index: open.index }));
  }
}

/**
 * Anthropic's status and error type for each of Parley's failures
 * (Anthropic's errors reference): a full queue or no upstream is its 529
 * overloaded_error, no credit its 402 billing_error.
 */
export const anthropicError: ErrorShape = (err) => ({ status: anthropicStatus(err)[0], body: anthropicErrorBody(err) });

const anthropicErrorBody = (err: ApiError) => ({ type: 'error', error: { type: anthropicStatus(err)[1], message: err.message } });

function anthropicStatus(err: ApiError): [number, string] {
  if (err.code === 'queue_full' || err.code === 'upstream_unavailable') return [529, 'overloaded_error'];
  if (err.code === 'request_too_large') return [413, 'request_too_large'];
  switch (err.type) {
    case 'authentication_error':
      return [401, 'authentication_error'];
    case 'insufficient_quota':
      return [err.status, 'billing_error'];
    case 'rate_limit_error':
      return [429, 'rate_limit_error'];
    case 'not_found_error':
      return [404, 'not_found_error'];
    case 'invalid_request_error':
      return [err.status, err.status === 404 ? 'not_found_error' : 'invalid_request_error'];
    default:
      return [err.status, 'api_error'];
  }
}
