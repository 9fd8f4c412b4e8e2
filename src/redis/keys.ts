// Every Redis key Parley uses, in one place, so that the layout can be read
// (and changed) without hunting through the modules that use it.
const P = 'parley:';

export const redisKeys = {
  /** Hash: email, name, created, granted, topped_up, held (micro-units), rpm, tpm overrides. */
  account: (id: string) => `${P}account:${id}`,
  /** Sorted set of all account ids by creation time. */
  accounts: `${P}accounts`,
  /** Sorted set: request id → expiry (ms) of each open hold. */
  holds: (account: string) => `${P}account:${account}:holds`,
  /** Hash: request id → amount held, or 'reclaimed'; taken away when the request is settled, so that it never is twice. */
  holdAmounts: (account: string) => `${P}account:${account}:hold-amounts`,
  /** Sorted set: request id → when its hold was reclaimed, for forgetting it in time. */
  reclaimedHolds: (account: string) => `${P}account:${account}:holds-reclaimed`,
  /** Hash per account and UTC day: "<model>\t<metric>" → total. */
  dailyUsage: (account: string, day: string) => `${P}account:${account}:usage:${day}`,
  /** Stream of an account's usage events, one per request that reached an upstream. */
  usageEvents: (account: string) => `${P}account:${account}:usage-events`,
  /** Stream of credit movements: grants, deductions, redeemed codes. */
  ledger: `${P}ledger`,
  /** Member login: email → hash (account, password hash). */
  member: (email: string) => `${P}member:${email.toLowerCase()}`,
  /** Hash of an API key, by the key's keyed hash: id, account, name, created, suffix, revoked. */
  apiKey: (hash: string) => `${P}apikey:${hash}`,
  /** String: key id → the key's keyed hash. */
  apiKeyById: (id: string) => `${P}apikey-id:${id}`,
  /** Sorted set of an account's key ids by creation time. */
  accountKeys: (account: string) => `${P}account:${account}:keys`,
  /** Pub/sub channel: the hash of each revoked key, so every replica drops it from its cache. */
  keyRevocations: `${P}keys:revoked`,
  /** Hash per key and minute window: requests, tokens. */
  rateWindow: (keyId: string, minute: number) => `${P}ratelimit:${keyId}:${minute}`,
  /** Hash: a credit code's amount and who redeemed it. */
  creditCode: (hash: string) => `${P}credit-code:${hash}`,
  /** Hash: a platform login session's account and member email; expires. */
  session: (id: string) => `${P}session:${id}`,
  /** Counter of login attempts per client address in a window. */
  loginAttempts: (client: string) => `${P}login-attempts:${client}`,
  /** Sorted sets of a model's prompt prefixes (routing placement keys), by when the fleet first and last saw each. */
  prefixes: (model: string) => ({ firstSeen: `${P}{prefixes:${model}}:first-seen`, lastSeen: `${P}{prefixes:${model}}:last-seen` }),
  /** Set when the demo account was made, so it is made once per Redis. */
  demoAccount: `${P}demo-account`,
} as const;
