// OpenAI's Responses API request (POST /v1/responses), as a zod schema that is
// also its type, and its mapping onto the one generation request the stages
// carry: a Chat Completions request. Parley keeps no state (SPEC 1.2): a
// request that points at a stored response or conversation is refused with
// that said, and `store` is accepted and nothing is kept.
import { z } from 'zod';
import type { ChatCompletionRequest, ChatMessage } from './chat-request.js';
import { ApiError, invalidParameter } from './errors.js';
import { parseRequest } from './request-parsing.js';
import { isServiceTier } from './service-tier.js';

const textPart = z.looseObject({ type: z.enum(['input_text', 'output_text']), text: z.string() });
const refusalPart = z.looseObject({ type: z.literal('refusal'), refusal: z.string() });
/** Parts a text model cannot take; refused with their place named (responsesToChat). */
const unreadablePart = z.looseObject({ type: z.enum(['input_image', 'input_file', 'input_audio']) });
const part = z.discriminatedUnion('type', [textPart, refusalPart, unreadablePart], {
  error: 'expected a content part of type input_text, output_text, refusal, input_image or input_file',
});

const messageItem = z.looseObject({
  type: z.literal('message').optional(),
  role: z.enum(['system', 'developer', 'user', 'assistant']),
  content: z.union([z.string(), z.array(part)], { error: 'expected a string or an array of content parts' }),
});
const functionCallItem = z.looseObject({ type: z.literal('function_call'), call_id: z.string(), name: z.string(), arguments: z.string(), namespace: z.string().optional() });
const functionCallOutputItem = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string(),
  output: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]),
});
const reasoningItem = z.looseObject({ type: z.literal('reasoning'), summary: z.array(z.looseObject({ text: z.string().optional() })).optional() });
const referenceItem = z.looseObject({ type: z.literal('item_reference'), id: z.string() });
const knownItem = z.union([messageItem, functionCallItem, functionCallOutputItem, reasoningItem, referenceItem]);
type KnownItem = z.infer<typeof knownItem>;
const KNOWN_ITEM_TYPES = new Set(['message', 'function_call', 'function_call_output', 'reasoning', 'item_reference']);
/** Items of tools Parley never offers (a hosted tool's call, a custom tool's): nothing a model here can read, so left out, as unknown fields are. */
const otherItem = z.looseObject({ type: z.string().refine((t) => !KNOWN_ITEM_TYPES.has(t), 'this item lacks a field its type needs (a function_call needs call_id, name and arguments; a message, role and content)') });

const item = z.union([knownItem, otherItem], {
  error: 'expected an input item: a message, function_call, function_call_output, reasoning or item_reference',
});

const functionTool = z.looseObject({ type: z.literal('function'), name: z.string().min(1), description: z.string().nullish(), parameters: z.looseObject({}).nullish() });
const namespaceTool = z.looseObject({ type: z.literal('namespace'), name: z.string().min(1), description: z.string().nullish(), tools: z.array(z.looseObject({ type: z.string() })) });
/** Hosted tools (web search, file search, code interpreter, computer use, image generation, MCP, ...): Parley cannot run them, so they are left out. */
const otherTool = z.looseObject({ type: z.string() });

export const responsesRequest = z.object({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(item).min(1)], { error: 'expected a string or a non-empty array of input items' }),
  instructions: z.string().nullish(),
  max_output_tokens: z.int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  stream: z.boolean().nullish(),
  store: z.boolean().nullish(),
  tools: z.array(z.union([functionTool, namespaceTool, otherTool])).nullish(),
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.literal('function'), name: z.string() }), z.looseObject({ type: z.string() })], {
      error: 'expected "none", "auto", "required" or {"type": "function", "name": "..."}',
    })
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z.looseObject({ format: z.looseObject({ type: z.enum(['text', 'json_object', 'json_schema']) }).nullish() }).nullish(),
  reasoning: z.looseObject({ effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).nullish(), summary: z.string().nullish() }).nullish(),
  user: z.string().max(256).nullish(),
  safety_identifier: z.string().max(256).nullish(),
  prompt_cache_key: z.string().max(1024).nullish(),
  metadata: z.record(z.string().max(64), z.string().max(512)).nullish(),
  truncation: z.enum(['auto', 'disabled']).nullish(),
  service_tier: z.string().nullish(),
  previous_response_id: z.string().nullish(),
  conversation: z.unknown().optional(),
});

export type ResponsesRequest = z.infer<typeof responsesRequest>;

export const KEEPS_NO_STATE = 'Parley keeps no state between requests: send the whole conversation in `input` with every request';

export function parseResponsesRequest(body: unknown): ResponsesRequest | ApiError {
  const parsed = parseRequest(responsesRequest, body);
  if (parsed instanceof ApiError) return parsed;
  if (parsed.previous_response_id != null) return invalidParameter('previous_response_id', `${KEEPS_NO_STATE} (previous_response_id cannot be used here).`);
  if (parsed.conversation != null) return invalidParameter('conversation', `${KEEPS_NO_STATE} (conversation cannot be used here).`);
  return parsed;
}

/** A namespace's function as the upstream sees it: its own tool, named with its namespace so that two namespaces never collide. */
export const NAMESPACE_SEPARATOR = '__';
const upstreamToolName = (name: string, namespace: string | undefined) => (namespace ? `${namespace}${NAMESPACE_SEPARATOR}${name}` : name);

type ChatTool = NonNullable<ChatCompletionRequest['tools']>[number];

function chatTools(tools: ResponsesRequest['tools']): ChatTool[] {
  const out: ChatTool[] = [];
  const add = (t: Record<string, unknown>, namespace?: string) => {
    if (t.type !== 'function' || typeof t.name !== 'string') return;
    out.push({ type: 'function', function: { name: upstreamToolName(t.name, namespace), description: t.description ?? undefined, parameters: t.parameters ?? undefined } });
  };
  for (const t of tools ?? []) {
    if (t.type === 'namespace') for (const inner of (t as z.infer<typeof namespaceTool>).tools) add(inner, t.name as string);
    else add(t);
  }
  return out;
}

const partsText = (parts: { type: string; text?: unknown; refusal?: unknown }[]) => parts.map((p) => (typeof p.text === 'string' ? p.text : typeof p.refusal === 'string' ? p.refusal : '')).join('');

/** The input items as chat messages: consecutive function calls become one assistant message's tool calls. */
function chatMessagesOf(input: ResponsesRequest['input']): ChatMessage[] | ApiError {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  const messages: ChatMessage[] = [];
  for (const [i, entry] of input.entries()) {
    if (!KNOWN_ITEM_TYPES.has(entry.type ?? 'message')) continue;
    const it = entry as KnownItem;
    if (it.type === 'item_reference') {
      return invalidParameter(`input[${i}]`, `${KEEPS_NO_STATE}: input[${i}] is an item_reference to ${it.id}; send the item itself.`);
    }
    if (it.type === 'reasoning') continue;
    if (it.type === 'function_call') {
      const call = { id: it.call_id, type: 'function' as const, function: { name: upstreamToolName(it.name, it.namespace), arguments: it.arguments } };
      const last = messages.at(-1);
      if (last?.role === 'assistant' && last.tool_calls) last.tool_calls.push(call);
      else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      continue;
    }
    if (it.type === 'function_call_output') {
      messages.push({ role: 'tool', tool_call_id: it.call_id, content: typeof it.output === 'string' ? it.output : partsText(it.output) });
      continue;
    }
    if (typeof it.content !== 'string') {
      const unreadable = it.content.findIndex((p) => p.type === 'input_image' || p.type === 'input_file' || p.type === 'input_audio');
      if (unreadable !== -1) {
        return invalidParameter(`input[${i}].content[${unreadable}]`, `input[${i}].content[${unreadable}]: ${it.content[unreadable].type} is not supported: the models here take text only.`);
      }
    }
    const content = typeof it.content === 'string' ? it.content : partsText(it.content);
    messages.push(it.role === 'assistant' ? { role: 'assistant', content } : { role: it.role, content });
  }
  return messages;
}

/** Responses' tool choice as chat's; a hosted tool's choice leaves the choice to the model. */
function toolChoiceOf(choice: ResponsesRequest['tool_choice']): ChatCompletionRequest['tool_choice'] {
  if (choice == null || typeof choice === 'string') return choice;
  return choice.type === 'function' && typeof choice.name === 'string' ? { type: 'function', function: { name: choice.name } } : 'auto';
}

const EFFORT: Record<string, ChatCompletionRequest['reasoning_effort']> = { none: 'none', minimal: 'minimal', low: 'low', medium: 'medium', high: 'high', xhigh: 'high' };

/** The Responses request as the chat request the stages carry, or the 400 for what no model here can take. */
export function responsesToChat(req: ResponsesRequest): ChatCompletionRequest | ApiError {
  const mapped = chatMessagesOf(req.input);
  if (mapped instanceof ApiError) return mapped;
  const messages: ChatMessage[] = req.instructions ? [{ role: 'system', content: req.instructions }, ...mapped] : mapped;
  if (messages.length === 0) return invalidParameter('input', 'input: at least one item must be a message or a function call output.');
  const tools = chatTools(req.tools);
  const format = req.text?.format;
  return {
    model: req.model,
    messages,
    max_tokens: req.max_output_tokens,
    temperature: req.temperature,
    top_p: req.top_p,
    stream: req.stream,
    ...(tools.length ? { tools, tool_choice: toolChoiceOf(req.tool_choice), parallel_tool_calls: req.parallel_tool_calls } : {}),
    ...(format && format.type !== 'text' ? { response_format: format.type === 'json_schema' ? { type: 'json_schema', json_schema: { ...format, type: undefined } } : { type: 'json_object' } } : {}),
    ...(req.reasoning?.effort ? { reasoning_effort: EFFORT[req.reasoning.effort] } : {}),
    user: req.user ?? req.safety_identifier ?? undefined,
    prompt_cache_key: req.prompt_cache_key,
    service_tier: isServiceTier(req.service_tier) ? req.service_tier : undefined,
  };
}
