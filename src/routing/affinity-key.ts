// What a request's prefix affinity is keyed by: the part of its prompt that
// says which upstream cache it needs. Hashed, so that the key is short and
// the same in every replica.
//
// - A conversation with no reply in it yet (a first turn, a single question
//   to a tenant's assistant) is keyed by its leading PLACEMENT_CHARS: a
//   tenant's system prompt, which its other requests share.
// - A conversation that has replies in it (an agent's session from its
//   second turn on) is keyed by everything before its first reply: the
//   system prompt and the first user turn, which every later turn of that
//   session repeats and no other session does. Each session then has a home
//   of its own, where its growing prompt stays cached, however long a system
//   prompt it shares with other sessions.
// - A client's hint (OpenAI's `prompt_cache_key`, Claude Code's session, a
//   header the operator names) is the key itself, from the first turn.
// - Where a model keeps each account's cache apart, each of these is the
//   account's own: one account's system prompt finds no other account's cache,
//   so it has a home of its own.
import { createHash } from 'node:crypto';
import { messageText, type ChatMessage } from '../protocol/chat-request.js';

/** Leading characters that key a first turn: a system prompt of this length and more identifies its tenant. */
export const PLACEMENT_CHARS = 512;
/** A session is keyed by at most this much of its opening: past it, two openings that agree are one conversation for routing. */
const MAX_OPENING_CHARS = 64 * 1024;

/** The key of the first `limit` characters of `text`, apart from keys of another kind. */
function keyOf(kind: string, text: string, limit: number): string {
  return createHash('sha1').update(kind).update(text.slice(0, limit)).digest('base64url').slice(0, 16);
}

/** The affinity key of a leading text (a completions prompt, an embeddings input). */
export const leadingTextKey = (text: string) => keyOf('lead', text, PLACEMENT_CHARS);

/** The affinity key a client's hint names. */
export const hintKey = (hint: string) => keyOf('hint', hint, MAX_OPENING_CHARS);

/** A key as one account's own, where a model keeps each account's prefix cache apart (accounts/cache-salt.ts). */
export const accountKey = (account: string, key: string) => keyOf('account', `${account}\n${key}`, Infinity);

/** The affinity key of a chat conversation (see the top of this file). */
export function conversationKey(messages: ChatMessage[]): string {
  const firstReply = messages.findIndex((m) => m.role === 'assistant');
  const opening = firstReply < 0 ? messages : messages.slice(0, firstReply);
  const limit = firstReply < 0 ? PLACEMENT_CHARS : MAX_OPENING_CHARS;
  let text = '';
  for (const m of opening) {
    text += `${m.role}\n${messageText(m)}\n\n`;
    if (text.length >= limit) break;
  }
  return firstReply < 0 ? leadingTextKey(text) : keyOf('session', text, limit);
}
