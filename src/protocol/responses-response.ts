// OpenAI's Responses API reply: the whole `response` object with its output
// items (reasoning, message, function calls) and the request's settings
// echoed, and the stream of typed events, each with its sequence number,
// that builds the same object item by item, rendered from the one
// normalized reply.
import { SSE_KEEP_ALIVE, type ChoiceDelta, type Completion, type ContentRun, type ReplyIdentity, type ToolCallFragment, type Usage, type ReplyRenderer } from './chat-response.js';
import type { ApiError } from './errors.js';
import { NAMESPACE_SEPARATOR, type ResponsesRequest } from './responses-request.js';

type OutputItem = Record<string, unknown>;

function usageOf(u: Usage) {
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.cached_tokens },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: u.reasoning_tokens ?? 0 },
    total_tokens: u.prompt_tokens + u.completion_tokens,
  };
}

/** A call's name as the client knows it: a namespace's function comes back under its own name, with its namespace. */
function callName(upstreamName: string, req: ResponsesRequest): { name: string; namespace?: string } {
  const at = upstreamName.indexOf(NAMESPACE_SEPARATOR);
  if (at > 0) {
    const namespace = upstreamName.slice(0, at);
    if (req.tools?.some((t) => t.type === 'namespace' && t.name === namespace)) return { namespace, name: upstreamName.slice(at + NAMESPACE_SEPARATOR.length) };
  }
  return { name: upstreamName };
}

const reasoningItem = (id: string, text: string): OutputItem => ({ type: 'reasoning', id, summary: text ? [{ type: 'summary_text', text }] : [] });
const outputText = (text: string) => ({ type: 'output_text', text, annotations: [], logprobs: [] });
const messageItem = (id: string, text: string, status: string): OutputItem => ({ type: 'message', id, status, role: 'assistant', content: status === 'in_progress' ? [] : [outputText(text)] });
const functionCallItem = (id: string, callId: string, upstreamName: string, args: string, status: string, req: ResponsesRequest): OutputItem => ({
  type: 'function_call', id, call_id: callId, ...callName(upstreamName, req), arguments: args, status,
});

/** The response object: the output so far, the status, the usage once known, and the request's settings as OpenAI echoes them. */
function responseObject(identity: ReplyIdentity, req: ResponsesRequest, output: OutputItem[], status: string, finish: string | null, usage: Usage | null, error: unknown = null) {
  const incomplete = status === 'completed' && finish === 'length';
  return {
    id: identity.id,
    object: 'response',
    created_at: identity.created,
    status: incomplete ? 'incomplete' : status,
    error,
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    instructions: req.instructions ?? null,
    max_output_tokens: req.max_output_tokens ?? null,
    metadata: req.metadata ?? {},
    model: identity.model,
    output,
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    previous_response_id: null,
    prompt_cache_key: req.prompt_cache_key ?? null,
    reasoning: { effort: req.reasoning?.effort ?? null, summary: req.reasoning?.summary ?? null },
    safety_identifier: req.safety_identifier ?? null,
    service_tier: identity.serviceTier,
    // Nothing is kept, whatever was asked.
    store: false,
    temperature: req.temperature ?? 1,
    text: { format: req.text?.format ?? { type: 'text' } },
    tool_choice: req.tool_choice ?? 'auto',
    tools: req.tools ?? [],
    top_p: req.top_p ?? 1,
    truncation: req.truncation ?? 'disabled',
    usage: usage && usageOf(usage),
    user: req.user ?? null,
  };
}

/**
 * A text delta event: its head (up to its sequence number, made per item),
 * then these around its literal. Written from text, not an object per piece:
 * `node bench/client-apis.mjs 8 4` gave streamed Responses ÷ chat 0.53 with
 * an event object stringified per piece, 0.89 (6 rounds) written this way.
 */
const DELTA_MIDDLE = ',"delta":';
const DELTA_TAIL = ',"logprobs":[]}\n\n';
/** Stands for a sequence number, or a place, until it is written: a JSON string literal holds no raw control character. */
const SEQUENCE_MARK = '\u0000';
/** Stands for a message's text in an event until its JSON is written in. */
const TEXT_MARK = '\u0000';
const TEXT_MARK_JSON = JSON.stringify(TEXT_MARK);

const itemIds = (identity: ReplyIdentity) => identity.id.slice('resp_'.length);

export function renderResponse(identity: ReplyIdentity, completion: Completion, req: ResponsesRequest) {
  const { message, finish_reason } = completion.choices[0];
  const id = itemIds(identity);
  const output: OutputItem[] = [];
  if (message.reasoning_content) output.push(reasoningItem(`rs_${id}`, message.reasoning_content));
  if (message.content) output.push(messageItem(`msg_${id}`, message.content, 'completed'));
  for (const [i, call] of (message.tool_calls ?? []).entries()) {
    output.push(functionCallItem(`fc_${id}_${i}`, call.id ?? `call_${id}_${i}`, call.function.name, call.function.arguments, 'completed', req));
  }
  // The SDKs make `output_text` from the output themselves; clients reading the JSON find it here too.
  return { ...responseObject(identity, req, output, 'completed', finish_reason, completion.usage), output_text: message.content ?? '' };
}

interface OpenItem {
  kind: 'reasoning' | 'message' | 'function_call';
  index: number;
  id: string;
  /** A reasoning summary's or a call's arguments so far. */
  text: string;
  /** A message's text so far, escaped as it was sent in JSON string literals (read back once, when it closes). */
  escaped: string[];
  /** A message's text delta event, split where its sequence number and its literal go. */
  deltaHead?: string;
  toolIndex?: number;
  callId?: string;
  name?: string;
}

/** One reply's typed events. Items open and close in turn: at most one is open at a time. */
export class ResponseEventRenderer implements ReplyRenderer {
  readonly keepAlive = SSE_KEEP_ALIVE;
  private sequence = 0;
  private readonly output: OutputItem[] = [];
  private open: OpenItem | undefined;
  private finish: string | null = null;

  constructor(private readonly identity: ReplyIdentity, private readonly req: ResponsesRequest) {}

  start(): string {
    const response = JSON.stringify({ response: responseObject(this.identity, this.req, [], 'in_progress', null, null) });
    return this.event('response.created', response) + this.event('response.in_progress', response);
  }

  content(run: ContentRun): [opening: string, pieces: string] {
    const opening = this.ensure('message');
    const open = this.open!;
    // Each event has its own sequence number: written as a mark no JSON literal holds, then numbered in order.
    const events = run.render(`${open.deltaHead}${SEQUENCE_MARK}${DELTA_MIDDLE}`, DELTA_TAIL).split(SEQUENCE_MARK);
    let numbered = events[0];
    for (let i = 1; i < events.length; i++) {
      // Each part is the event's literal and tail (then the next one's head); a literal holds no raw quote, so the tail is found after it.
      open.escaped.push(events[i].slice(DELTA_MIDDLE.length + 1, events[i].indexOf(DELTA_TAIL) - 1));
      numbered += this.sequence++ + events[i];
    }
    return [opening, numbered];
  }

  deltas(choices: ChoiceDelta[]): string {
    let out = '';
    for (const c of choices) {
      if (c.index !== 0) continue;
      const { reasoning_content: reasoning, content: text, tool_calls: calls } = c.delta;
      if (reasoning) {
        out += this.ensure('reasoning');
        this.open!.text += reasoning;
        out += this.event('response.reasoning_summary_text.delta', { item_id: this.open!.id, output_index: this.open!.index, summary_index: 0, delta: reasoning });
      }
      if (text) out += this.ensure('message') + this.textDelta(text);
      for (const call of calls ?? []) out += this.toolPiece(call);
      if (c.finish_reason) this.finish = c.finish_reason;
    }
    return out;
  }

  end(usage: Usage): string {
    const closing = this.close();
    const response = responseObject(this.identity, this.req, this.output, 'completed', this.finish, usage);
    return closing + this.event(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
  }

  failure(err?: ApiError): string {
    if (err) return this.event('error', { code: err.code, message: err.message, param: err.param });
    const error = { code: 'server_error', message: 'The model stopped answering before the reply was complete. Nothing was charged for this reply; please retry.' };
    return this.event('response.failed', { response: responseObject(this.identity, this.req, this.output, 'failed', null, null, error) });
  }

  private textDelta(delta: string): string {
    const literal = JSON.stringify(delta);
    this.open!.escaped.push(literal.slice(1, -1));
    return `${this.open!.deltaHead}${this.sequence++}${DELTA_MIDDLE}${literal}${DELTA_TAIL}`;
  }

  private toolPiece(call: ToolCallFragment): string {
    let out = '';
    if (this.open?.kind !== 'function_call' || this.open.toolIndex !== call.index) {
      out += this.close();
      const index = this.output.length;
      const id = `fc_${itemIds(this.identity)}_${index}`;
      this.open = { kind: 'function_call', index, id, text: '', escaped: [], toolIndex: call.index, callId: call.id ?? `call_${itemIds(this.identity)}_${index}`, name: call.function?.name ?? '' };
      out += this.itemEvent('response.output_item.added', index, functionCallItem(id, this.open.callId!, this.open.name!, '', 'in_progress', this.req));
    }
    const delta = call.function?.arguments;
    if (delta) {
      this.open!.text += delta;
      out += this.event('response.function_call_arguments.delta', { item_id: this.open!.id, output_index: this.open!.index, delta });
    }
    return out;
  }

  /** Opens an item of `kind` unless one is open, closing the one before: '' when it is open already. */
  private ensure(kind: 'reasoning' | 'message'): string {
    if (this.open?.kind === kind) return '';
    const closing = this.close();
    const index = this.output.length;
    const id = `${kind === 'message' ? 'msg' : 'rs'}_${itemIds(this.identity)}_${index}`;
    this.open = { kind, index, id, text: '', escaped: [] };
    if (kind === 'message') {
      this.open.deltaHead = `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"${id}","output_index":${index},"content_index":0,"sequence_number":`;
      return closing + this.itemEvent('response.output_item.added', index, messageItem(id, '', 'in_progress'))
        + this.event('response.content_part.added', { item_id: id, output_index: index, content_index: 0, part: outputText('') });
    }
    return closing + this.itemEvent('response.output_item.added', index, reasoningItem(id, ''))
      + this.event('response.reasoning_summary_part.added', { item_id: id, output_index: index, summary_index: 0, part: { type: 'summary_text', text: '' } });
  }

  /** Closes the open item: its `.done` events, and the item whole in the output. */
  private close(): string {
    const open = this.open;
    if (!open) return '';
    this.open = undefined;
    const at = { item_id: open.id, output_index: open.index };
    if (open.kind === 'message') return this.closeMessage(open, at);
    let item: OutputItem;
    let out: string;
    if (open.kind === 'reasoning') {
      item = reasoningItem(open.id, open.text);
      out = this.event('response.reasoning_summary_text.done', { ...at, summary_index: 0, text: open.text })
        + this.event('response.reasoning_summary_part.done', { ...at, summary_index: 0, part: { type: 'summary_text', text: open.text } });
    } else {
      item = functionCallItem(open.id, open.callId!, open.name!, open.text, 'completed', this.req);
      out = this.event('response.function_call_arguments.done', { ...at, arguments: open.text });
    }
    this.output.push(item);
    return out + this.itemEvent('response.output_item.done', open.index, item);
  }

  /** A message's `.done` events. Its text goes out three times more: as the JSON it came in, not escaped again each time. */
  private closeMessage(open: OpenItem, at: { item_id: string; output_index: number }): string {
    const textJson = `"${open.escaped.join('')}"`;
    const withText = (fields: object) => JSON.stringify(fields).replace(TEXT_MARK_JSON, () => textJson);
    this.output.push(messageItem(open.id, JSON.parse(textJson), 'completed'));
    return this.event('response.output_text.done', withText({ ...at, content_index: 0, text: TEXT_MARK, logprobs: [] }))
      + this.event('response.content_part.done', withText({ ...at, content_index: 0, part: outputText(TEXT_MARK) }))
      + this.event('response.output_item.done', withText({ output_index: open.index, item: messageItem(open.id, TEXT_MARK, 'completed') }));
  }

  private itemEvent(type: string, index: number, item: OutputItem): string {
    return this.event(type, { output_index: index, item });
  }

  /** An event: its type and sequence number, then `fields` (a JSON object, or the text of one). */
  private event(type: string, fields: object | string): string {
    const json = typeof fields === 'string' ? fields : JSON.stringify(fields);
    return `event: ${type}\ndata: {"type":"${type}","sequence_number":${this.sequence++},${json.slice(1)}\n\n`;
  }
}
