// Turns `Authorization: Bearer <key>` into the calling account, or says why
// it is refused (the gateway makes that its 401). Lookups are
// cached in-process; a revocation is published on Redis and every replica
// drops the key from its cache at once. If the subscription drops, messages
// may have been missed, so the whole cache is cleared when it comes back.
import { hash as sha256Of } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Redis } from 'ioredis';
import type { ServiceTier } from '../protocol/service-tier.js';
import type { RateLimits } from '../ratelimit/rate-limiter.js';
import { subscriberFor } from '../redis/connection.js';
import { redisKeys } from '../redis/keys.js';
import { accountCacheSalt } from './cache-salt.js';
import { getAccount } from './accounts.js';
import { findApiKeyByHash, hashApiKey, isWellFormedKey, maskedKey, touchApiKey, type ApiKeyRecord, type KeyBudget } from './api-keys.js';

export interface Caller {
  account: string;
  keyId: string;
  /** The account's own rate limits, where an operator set them. */
  limits: Partial<RateLimits>;
  /** The models the key may call; null for every one. */
  models: string[] | null;
  /** The key's spending budget; null for none. */
  budget: KeyBudget | null;
  /** The key's service tier: what its requests are served at unless they ask for another. */
  tier: ServiceTier;
  /** The account's prefix-cache salt (accounts/cache-salt.ts). */
  cacheSalt: string;
}

/** Why a key is refused, in words for its client. */
export interface KeyRefusal {
  refused: string;
}

interface KnownKey {
  record: ApiKeyRecord;
  limits: Partial<RateLimits>;
  /**
   * Made with the key's record, not per request: its HMAC took 4.2 µs of a request's 296 in a CPU profile of whole
   * replies at 32 connections (`node bench/cpu-profile.mjs 4e458b7 whole 32 8 3`, 2026-11-29).
   */
  cacheSalt: string;
  /** When this replica last wrote the key's last-used time. */
  touchedAt: number;
}

const CACHE_TTL_MS = 60_000;
const LAST_USED_EVERY_MS = 60_000;

export class KeyAuthenticator {
  private readonly cache = new LRUCache<string, KnownKey | 'unknown'>({ max: 100_000, ttl: CACHE_TTL_MS });
  /**
   * A presented key's HMAC, which never changes, remembered under the key's SHA-256, so that no key is kept here;
   * the one-shot SHA-256 takes 0.4 µs in a loop where the HMAC takes 2.3. A CPU profile of whole replies at 32
   * connections put the HMAC at 7.9 µs a request and this at 3.4 (`node bench/cpu-profile.mjs HEAD`, 2026-11-28,
   * against 985563a; with the pooled ids, 509 against 564 µs of CPU a request behind a 20 ms first byte:
   * gateway/random-ids.ts). A tenant sending made-up keys only turns the LRU's entries over, and a key that falls out
   * costs an HMAC again: 10,000 entries (2.2 MB of heap) hold the keys in use on a replica.
   */
  private readonly hmacOfKey = new LRUCache<string, string>({ max: 10_000 });
  /** A key id's hash, which never changes: a batch asks for it at each of its lines. */
  private readonly hashOfKeyId = new LRUCache<string, string>({ max: 100_000 });

  private constructor(private readonly redis: Redis, private readonly subscriber: Redis, private readonly secret: string) {}

  static async start(redis: Redis, secret: string): Promise<KeyAuthenticator> {
    const sub = subscriberFor(redis);
    const auth = new KeyAuthenticator(redis, sub, secret);
    sub.on('message', (_channel: string, hash: string) => auth.cache.delete(hash));
    await sub.subscribe(redisKeys.keyRevocations);
    // Listened for once subscribed, so that only reconnections are heard: the first 'ready' came before the answer.
    sub.on('ready', () => {
      // Cleared once subscribed again, so that no key looked up before then outlives a revocation it missed.
      // A renewal that fails is tried again at the next reconnection.
      sub.subscribe(redisKeys.keyRevocations).then(
        () => auth.cache.clear(),
        () => {},
      );
    });
    return auth;
  }

  /** The caller, or why its key is refused; rejects only when Redis cannot be reached. */
  async authenticate(authorization: string | undefined): Promise<Caller | KeyRefusal> {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!match) {
      return {
        refused: authorization
          ? 'The Authorization header must be "Bearer <API_KEY>".'
          : "You didn't provide an API key. Send it in the Authorization header as \"Bearer <API_KEY>\"; create one on the platform's API keys page.",
      };
    }
    const key = match[1];
    if (!isWellFormedKey(key)) return { refused: 'This is not a Parley API key. Keys look like sk-parley-... and are created on the platform.' };
    const hash = this.hmacOf(key);
    // A cached key is answered without waiting on anything.
    const known = this.cache.get(hash) ?? (await this.lookup(hash));
    if (known === 'unknown') return { refused: `Incorrect API key provided: ${maskedKey(key.slice(-4))}. Create a key on the platform's API keys page.` };
    return this.callerOf(hash, known);
  }

  /** The caller a key id names, as its key would authenticate now: a batch's lines run as the key that made it. */
  async callerOfKeyId(keyId: string): Promise<Caller | KeyRefusal> {
    const hash = this.hashOfKeyId.get(keyId) ?? (await this.redis.get(redisKeys.apiKeyById(keyId)));
    if (hash !== null) this.hashOfKeyId.set(keyId, hash);
    const known = hash === null ? 'unknown' : (this.cache.get(hash) ?? (await this.lookup(hash)));
    if (known === 'unknown') return { refused: 'The API key that made this batch no longer exists.' };
    return this.callerOf(hash!, known);
  }

  private hmacOf(key: string): string {
    const digest = sha256Of('sha256', key);
    let hmac = this.hmacOfKey.get(digest);
    if (hmac === undefined) this.hmacOfKey.set(digest, (hmac = hashApiKey(this.secret, key)));
    return hmac;
  }

  private callerOf(hash: string, known: KnownKey): Caller | KeyRefusal {
    const { record, limits, cacheSalt } = known;
    if (record.revoked) return { refused: `The API key ${maskedKey(record.suffix)} has been revoked. Create a new key on the platform's API keys page.` };
    if (record.expiresAt !== null && Date.now() >= record.expiresAt) {
      return { refused: `The API key ${maskedKey(record.suffix)} expired at ${new Date(record.expiresAt).toISOString()}. Create a new key on the platform's API keys page.` };
    }
    this.noteUse(hash, known);
    return { account: record.account, keyId: record.id, limits, models: record.models, budget: record.budget, tier: record.tier, cacheSalt };
  }

  /** The entries each in-process cache holds: a tenant presenting made-up keys fills the key HMACs' to its bound. */
  remembered(): { keys: number; keyHmacs: number; keyIdHashes: number } {
    return { keys: this.cache.size, keyHmacs: this.hmacOfKey.size, keyIdHashes: this.hashOfKeyId.size };
  }

  async close(): Promise<void> {
    this.subscriber.disconnect();
  }

  private async lookup(hash: string): Promise<KnownKey | 'unknown'> {
    const known = await this.fetch(hash);
    this.cache.set(hash, known);
    return known;
  }

  private async fetch(hash: string): Promise<KnownKey | 'unknown'> {
    const record = await findApiKeyByHash(this.redis, hash);
    if (!record) return 'unknown';
    const account = await getAccount(this.redis, record.account);
    return { record, limits: { requestsPerMinute: account?.requestsPerMinute, tokensPerMinute: account?.tokensPerMinute, concurrentRequests: account?.concurrentRequests }, cacheSalt: accountCacheSalt(this.secret, record.account), touchedAt: 0 };
  }

  private noteUse(hash: string, known: KnownKey): void {
    const now = Date.now();
    if (now - known.touchedAt < LAST_USED_EVERY_MS) return;
    known.touchedAt = now;
    touchApiKey(this.redis, hash, now).catch(() => (known.touchedAt = 0));
  }
}
