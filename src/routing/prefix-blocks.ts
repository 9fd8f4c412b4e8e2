// The request's leading content as chained block hashes, for prefix
// affinity. Blocks are fixed-size runs of the conversation's text in order
// (roles included), so two requests share block hash i exactly when their
// first i+1 blocks are the same, as an engine's prefix cache sees it.
import { createHash } from 'node:crypto';
import { messageText, type ChatMessage } from '../protocol/chat-request.js';

export const BLOCK_CHARS = 128;
const MAX_BLOCKS = 64;

/** A conversation's leading text as an engine's prefix cache sees it: the messages in order, roles included. */
export function conversationText(messages: ChatMessage[]): string {
  let text = '';
  for (const m of messages) {
    text += `${m.role}\n${messageText(m)}\n\n`;
    if (text.length >= BLOCK_CHARS * MAX_BLOCKS) break;
  }
  return text;
}

/**
 * What a request that names its cache (OpenAI's `prompt_cache_key`: Codex
 * sends its session id) routes by, in place of its leading text: two agent
 * sessions with the same long system prompt then each keep their own
 * upstream, as a session's cache needs.
 */
export const cacheKeyText = (key: string) => `prompt_cache_key\n${key}`;

export function prefixBlocks(text: string): string[] {
  const count = Math.min(MAX_BLOCKS, Math.max(1, Math.floor(text.length / BLOCK_CHARS)));
  const blocks: string[] = [];
  let chain = '';
  for (let i = 0; i < count; i++) {
    const block = count === 1 && text.length < BLOCK_CHARS ? text : text.slice(i * BLOCK_CHARS, (i + 1) * BLOCK_CHARS);
    chain = createHash('sha1').update(chain).update(block).digest('base64url').slice(0, 16);
    blocks.push(chain);
  }
  return blocks;
}
