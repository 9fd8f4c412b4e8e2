// Anthropic's Messages API request (POST /v1/messages), as a zod schema that
// is also its type, and its mapping onto the one generation request the
// stages carry: a Chat Completions request. Fields the mapping has no use for
// (cache_control, context_management, container, mcp_servers) are accepted
// and dropped, as unknown fields are.
import { z } from 'zod';
import { MAX_STOP_SEQUENCES, stopString, type ChatCompletionRequest, type ChatMessage } from './chat-request.js';
import { invalidParameter, type ApiError } from './errors.js';
import { parseRequest } from './request-parsing.js';
import { isServiceTier } from './service-tier.js';

const textBlock = z.looseObject({ type: z.literal('text'), text: z.string() });
const toolUseBlock = z.looseObject({ type: z.literal('tool_use'), id: z.string(), name: z.string(), input: z.unknown() });
const toolResultBlock = z.looseObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string(),
  content: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]).optional(),
  is_error: z.boolean().optional(),
});
const thinkingBlock = z.looseObject({ type: z.literal('thinking'), thinking: z.string(), signature: z.string().optional() });
const redactedThinkingBlock = z.looseObject({ type: z.literal('redacted_thinking') });
/** Blocks a text model cannot take; refused with their place named (messagesToChat). */
const unreadableBlock = z.looseObject({ type: z.enum(['image', 'document', 'search_result', 'container_upload']) });

const knownBlock = z.discriminatedUnion('type', [textBlock, toolUseBlock, toolResultBlock, thinkingBlock, redactedThinkingBlock, unreadableBlock]);
const KNOWN_BLOCK_TYPES = new Set(['text', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking', 'image', 'document', 'search_result', 'container_upload']);
/** Blocks of Anthropic's server tools (their calls and results) and later kinds: nothing a model here can read, so left out, as unknown fields are. */
const otherBlock = z.looseObject({ type: z.string().refine((t) => !KNOWN_BLOCK_TYPES.has(t), 'this block lacks a field its type needs (a tool_use needs id, name and input; a tool_result, tool_use_id)') });
const block = z.union([knownBlock, otherBlock], {
  error: 'expected a content block of type text, tool_use, tool_result, thinking, redacted_thinking, image or document',
});
const content = z.union([z.string(), z.array(block)], { error: 'expected a string or an array of content blocks' });

const message = z.object({ role: z.enum(['user', 'assistant', 'system']), content });

const tool = z.looseObject({
  name: z.string().min(1),
  description: z.string().optional(),
  input_schema: z.looseObject({}).optional(),
  type: z.string().optional(),
});

export const messagesRequest = z.object({
  model: z.string().min(1),
  messages: z.array(message).min(1),
  max_tokens: z.int().min(1),
  system: z.union([z.string(), z.array(textBlock)], { error: 'expected a string or an array of text blocks' }).optional(),
  stop_sequences: z.array(stopString).max(MAX_STOP_SEQUENCES).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.int().min(0).optional(),
  stream: z.boolean().optional(),
  tools: z.array(tool).optional(),
  tool_choice: z
    .discriminatedUnion('type', [
      z.looseObject({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
      z.looseObject({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
      z.looseObject({ type: z.literal('tool'), name: z.string(), disable_parallel_tool_use: z.boolean().optional() }),
      z.looseObject({ type: z.literal('none') }),
    ], { error: 'expected {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "..."} or {"type": "none"}' })
    .optional(),
  thinking: z.looseObject({ type: z.enum(['enabled', 'disabled', 'adaptive']), budget_tokens: z.int().optional() }).optional(),
  output_config: z.looseObject({ effort: z.enum(['low', 'medium', 'high', 'max']).optional() }).optional(),
  metadata: z.looseObject({ user_id: z.string().nullish() }).optional(),
  service_tier: z.string().optional(),
});

export type MessagesRequest = z.infer<typeof messagesRequest>;

/** count_tokens takes a Messages request without its reply cap. */
const countTokensRequest = messagesRequest.omit({ max_tokens: true }).extend({ max_tokens: z.int().min(1).optional() });

export function parseMessagesRequest(body: unknown): MessagesRequest | ApiError {
  return parseRequest(messagesRequest, body);
}

export function parseCountTokensRequest(body: unknown): MessagesRequest | ApiError {
  const parsed = parseRequest(countTokensRequest, body);
  return 'model' in parsed ? { ...parsed, max_tokens: parsed.max_tokens ?? 1 } : parsed;
}

/**
 * Claude Code opens its system prompt with a block that names its version
 * (and in some versions changes with every request). Left in, every request's
 * prefix would differ from the last: no upstream prefix cache would hit and
 * prefix routing would scatter a session. It says nothing to the model.
 */
const BILLING_HEADER = /^x-anthropic-billing-header:/;
/** The header as the first line of a system prompt sent as one string. */
const BILLING_HEADER_LINE = /^x-anthropic-billing-header:[^\n]*\n?/;

type Block = z.infer<typeof knownBlock>;

const blocksText = (blocks: { type: string; text?: unknown }[]) => blocks.map((b) => (b.type === 'text' && typeof b.text === 'string' ? b.text : '')).join('');

function systemText(system: MessagesRequest['system']): string {
  if (system === undefined) return '';
  if (typeof system === 'string') return system.replace(BILLING_HEADER_LINE, '');
  return system.filter((b) => !BILLING_HEADER.test(b.text)).map((b) => b.text).join('\n');
}

/** One Anthropic message as chat messages: tool results become tool messages (first, as they answer the turn before), tool uses the assistant's tool calls; thinking from earlier turns is dropped. */
function chatMessagesOf(m: MessagesRequest['messages'][number], at: number): ChatMessage[] | ApiError {
  if (typeof m.content === 'string') return [{ role: m.role, content: m.content } as ChatMessage];
  const out: ChatMessage[] = [];
  let text = '';
  const toolCalls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] = [];
  for (const [i, entry] of m.content.entries()) {
    if (!KNOWN_BLOCK_TYPES.has(entry.type)) continue;
    const b = entry as Block;
    switch (b.type) {
      case 'text':
        if (!(m.role === 'system' && BILLING_HEADER.test(b.text))) text += b.text;
        break;
      case 'tool_use':
        toolCalls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } });
        break;
      case 'tool_result': {
        const result = typeof b.content === 'string' ? b.content : blocksText(b.content ?? []);
        out.push({ role: 'tool', tool_call_id: b.tool_use_id, content: b.is_error ? `Error: ${result}` : result });
        break;
      }
      case 'thinking':
      case 'redacted_thinking':
        break;
      default:
        return invalidParameter(`messages[${at}].content[${i}]`, `messages.${at}.content.${i}: ${b.type} blocks are not supported: the models here take text only.`);
    }
  }
  if (m.role === 'assistant') {
    if (text || toolCalls.length) out.push({ role: 'assistant', content: text || null, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) });
  } else if (text) out.push({ role: m.role, content: text } as ChatMessage);
  return out;
}

/** The session Claude Code names in `metadata.user_id` (JSON holding a `session_id`), as a cache key: its turns then route together. */
function claudeCodeSession(userId: string | null | undefined): string | undefined {
  if (!userId?.startsWith('{')) return undefined;
  try {
    const session = (JSON.parse(userId) as { session_id?: unknown }).session_id;
    return typeof session === 'string' && session ? `claude-code-session:${session}` : undefined;
  } catch {
    return undefined;
  }
}

const EFFORT: Record<string, ChatCompletionRequest['reasoning_effort']> = { low: 'low', medium: 'medium', high: 'high', max: 'high' };

/** Anthropic's tool choice as OpenAI's, and whether parallel calls are allowed. */
function toolChoiceOf(choice: MessagesRequest['tool_choice']): Pick<ChatCompletionRequest, 'tool_choice' | 'parallel_tool_calls'> {
  if (!choice) return {};
  const parallel = 'disable_parallel_tool_use' in choice && choice.disable_parallel_tool_use ? { parallel_tool_calls: false } : {};
  if (choice.type === 'tool') return { tool_choice: { type: 'function', function: { name: choice.name } }, ...parallel };
  return { tool_choice: choice.type === 'any' ? 'required' : choice.type, ...parallel };
}

/** The Messages request as the chat request the stages carry, or the 400 for a block no model here can read. */
export function messagesToChat(req: MessagesRequest): ChatCompletionRequest | ApiError {
  const messages: ChatMessage[] = [];
  const system = systemText(req.system);
  if (system) messages.push({ role: 'system', content: system });
  for (const [i, m] of req.messages.entries()) {
    const mapped = chatMessagesOf(m, i);
    if (!Array.isArray(mapped)) return mapped;
    messages.push(...mapped);
  }
  if (messages.length === 0) return invalidParameter('messages', 'messages: at least one message must have content.');
  // Anthropic's server tools (web search, code execution) have a type and no schema: Parley cannot run them.
  const tools = req.tools?.filter((t) => t.input_schema).map((t) => ({ type: 'function' as const, function: { name: t.name, description: t.description, parameters: t.input_schema } }));
  const effort = req.thinking?.type === 'disabled' ? undefined : req.output_config?.effort;
  const user = req.metadata?.user_id?.slice(0, 256);
  const session = claudeCodeSession(req.metadata?.user_id);
  return {
    model: req.model,
    messages,
    max_tokens: req.max_tokens,
    temperature: req.temperature,
    top_p: req.top_p,
    stop: req.stop_sequences?.length ? req.stop_sequences : undefined,
    stream: req.stream,
    ...(tools?.length ? { tools, ...toolChoiceOf(req.tool_choice) } : {}),
    ...(effort ? { reasoning_effort: EFFORT[effort] } : {}),
    ...(user ? { user } : {}),
    ...(session ? { prompt_cache_key: session } : {}),
    // Anthropic's `standard_only` is the default tier; `auto` the key's; OpenAI's names are taken too.
    service_tier: req.service_tier === 'standard_only' ? 'default' : isServiceTier(req.service_tier) ? req.service_tier : undefined,
  };
}
