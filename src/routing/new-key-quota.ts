// How many new affinity keys one account may add to a model's known keys
// (routing/known-prefixes.ts). Those hold at most MAX_KNOWN_PREFIXES and let
// the least recently seen go, so an account naming a new session at every
// request (a bug, or a tenant cycling `prompt_cache_key`) would push every
// other team's keys out, and their homes and moves with them. Past its quota
// an account's new keys go by their rendezvous order alone: the same endpoint
// on every replica, with no place in the fleet's order and nothing kept.
// Counted by each replica, per model, over PREFIX_IDLE_MS (how long an idle
// key is kept).
import { LRUCache } from 'lru-cache';
import { MAX_KNOWN_PREFIXES, PREFIX_IDLE_MS } from './known-prefixes.js';

/** New keys an account may add to a model's known keys, per replica, in PREFIX_IDLE_MS: an eighth of those kept. */
export const NEW_KEYS_PER_ACCOUNT = MAX_KNOWN_PREFIXES / 8;

export class NewKeyQuota {
  /** Keys added, by model and account, since the first of them (`noUpdateTTL`: the window does not slide). */
  private readonly added = new LRUCache<string, number>({ max: 10_000, ttl: PREFIX_IDLE_MS, noUpdateTTL: true });
  /**
   * The keys counted, so that one counts once: a session's first requests sent at once are each new until the
   * fleet has placed the key (an agent's parallel tool calls would otherwise spend several of its quota).
   */
  private readonly counted = new LRUCache<string, true>({ max: MAX_KNOWN_PREFIXES, ttl: PREFIX_IDLE_MS, noUpdateTTL: true });

  /** Whether `account` may add `key` to `model`'s known keys; counts it where it may. */
  admits(model: string, account: string, key: string): boolean {
    const id = `${model}\n${account}`;
    const keyId = `${id}\n${key}`;
    if (this.counted.has(keyId)) return true;
    const added = this.added.get(id) ?? 0;
    if (added >= NEW_KEYS_PER_ACCOUNT) return false;
    this.added.set(id, added + 1);
    this.counted.set(keyId, true);
    return true;
  }
}
