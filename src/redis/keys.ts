// Every Redis key Parley uses, in one place, so that the layout can be read
// (and changed) without hunting through the modules that use it.
//
// Laid out for Redis Cluster: everything an account's scripts touch together
// (its balance, holds, usage, rate windows, ledger) carries the account's hash
// tag, `{a:ID}`, so each admission and each settlement runs within one slot,
// on one primary. Keys that are looked up on their own (an API key by its
// hash, a member by email, a session, a credit code) have their own slots;
// nothing writes two of those in one command.
const P = 'parley:';

/** The prefix of every key of one account: the part in braces is the hash tag that places them in one slot. */
export const accountTag = (id: string) => `${P}{a:${id}}:`;

export const redisKeys = {
  /** Hash: email, name, created, granted, topped_up, held (micro-units), rpm, tpm overrides. */
  account: (id: string) => `${accountTag(id)}account`,
  /** Sorted set of all account ids by creation time. */
  accounts: `${P}accounts`,
  /** Sorted set: request id → expiry (ms) of each open hold. */
  holds: (account: string) => `${accountTag(account)}holds`,
  /** Hash: request id → amount held, or 'reclaimed'; taken away when the request is settled, so that it never is twice. */
  holdAmounts: (account: string) => `${accountTag(account)}hold-amounts`,
  /** Sorted set: request id → when its hold was reclaimed, for forgetting it in time. */
  reclaimedHolds: (account: string) => `${accountTag(account)}holds-reclaimed`,
  /** Hash per account and UTC day: "<model>\t<api>\t<tier>\t<metric>" → total (billing/credit-ledger.ts). */
  dailyUsage: (account: string, day: string) => `${accountTag(account)}usage:${day}`,
  /** The same, of one of the account's keys. */
  keyDailyUsage: (account: string, keyId: string, day: string) => `${accountTag(account)}key-usage:${keyId}:${day}`,
  /** Stream of an account's usage events, one per request that reached an upstream. */
  usageEvents: (account: string) => `${accountTag(account)}usage-events`,
  /** Stream of an account's credit movements: grants, deductions, redeemed codes. */
  ledger: (account: string) => `${accountTag(account)}ledger`,
  /** Hash: a credit change's id (an Idempotency-Key, a redeemed code) → the balance it left, so that it is applied once. */
  appliedChanges: (account: string) => `${accountTag(account)}applied-changes`,
  /** Hash: a key's budget use: held (its open holds), and spent:total, spent:d:YYYY-MM-DD or spent:m:YYYY-MM per period. */
  keyBudget: (account: string, keyId: string) => `${accountTag(account)}key-budget:${keyId}`,
  /** Hash: request id → "<key budget>\t<period field>\t<amount>" for each open hold made under a key's budget. */
  holdBudgets: (account: string) => `${accountTag(account)}hold-budgets`,
  /** Member login: email → hash (account, password hash). */
  member: (email: string) => `${P}member:${email.toLowerCase()}`,
  /** Hash of an API key, by the key's keyed hash: id, account, name, created, suffix, revoked. */
  apiKey: (hash: string) => `${P}apikey:${hash}`,
  /** String: key id → the key's keyed hash. */
  apiKeyById: (id: string) => `${P}apikey-id:${id}`,
  /** Set of the emails of an account's members. */
  accountMembers: (account: string) => `${accountTag(account)}members`,
  /** Sorted set of an account's key ids by creation time. */
  accountKeys: (account: string) => `${accountTag(account)}keys`,
  /** Sorted set of the account's revoked key ids by when they were revoked: the oldest are forgotten first. */
  revokedKeys: (account: string) => `${accountTag(account)}keys-revoked`,
  /** Pub/sub channel: the hash of each revoked key, so every replica drops it from its cache. */
  keyRevocations: `${P}keys:revoked`,
  /** Hash per account and minute window: requests, tokens; in the account's slot, for the hold script. */
  rateWindow: (account: string, minute: number) => `${accountTag(account)}ratelimit:${minute}`,
  /** Hash: a credit code's amount and who redeemed it. */
  creditCode: (hash: string) => `${P}credit-code:${hash}`,
  /** Hash: a platform login session's account and member email; expires. */
  session: (id: string) => `${P}session:${id}`,
  /** Counter of a kind of platform attempt (login, signup) per client address in a window. */
  clientAttempts: (kind: string, client: string) => `${P}${kind}-attempts:${client}`,
  /**
   * A model's affinity keys (routing/affinity-key.ts): sorted sets by when the fleet first and last saw each (Redis
   * time, µs); the keys it forgot lately, by a count of forgettings; hash of that count, the highest of it no longer
   * listed, the last place given, the count of moves and when the order began; hash of the keys away from their home
   * and where each went; the keys by the count of moves when each last moved (routing/prefix-sharing.ts).
   */
  prefixes: (model: string) => ({
    firstSeen: `${P}{affinity-keys:${model}}:first-seen`,
    lastSeen: `${P}{affinity-keys:${model}}:last-seen`,
    forgotten: `${P}{affinity-keys:${model}}:forgotten`,
    forgetting: `${P}{affinity-keys:${model}}:forgetting`,
    movedTo: `${P}{affinity-keys:${model}}:moved-to`,
    moves: `${P}{affinity-keys:${model}}:moves`,
  }),
  /**
   * An endpoint's slots as the fleet shares them: leases, flex and the rest (score: when each lapses); the replicas
   * waiting, by tier (score: when they last asked); hash of the most other-tier leases held at once, by step of PEAK_STEP_MS.
   */
  endpointSlots: (endpoint: string) => ({
    flexLeases: `${P}{slots:${endpoint}}:leases-flex`,
    otherLeases: `${P}{slots:${endpoint}}:leases-other`,
    otherPeaks: `${P}{slots:${endpoint}}:peaks-other`,
    priorityWaiting: `${P}{slots:${endpoint}}:waiting-priority`,
    defaultWaiting: `${P}{slots:${endpoint}}:waiting-default`,
  }),
  /** Hash: per gateway replica, when it last wrote (Redis time, ms) and its requests at each endpoint (JSON). */
  fleetLoad: `${P}fleet-load`,
  /**
   * Hash: per endpoint, its engine's last load reading (Redis time it was written, then JSON), and `claim:<endpoint>`,
   * the replica reading it this interval and until when; per replica, `#held:<replica>`, its requests that gave back a
   * slot at each endpoint in its last interval and how long they held it (routing/engine-reports.ts).
   */
  engineLoads: `${P}engine-loads`,
  /**
   * A batch's keys, in its account's slot (batches/batch-store.ts): its hash (status, times, key, counts); its
   * lines (number → custom id and body); the numbers still to run, in the order they run; those in flight (score:
   * when the replica running it lapses); each line's tries; its results (number → result line, and `#` counters).
   */
  batch: (account: string, id: string) => {
    const at = `${accountTag(account)}batch:${id}`;
    return { meta: at, lines: `${at}:lines`, todo: `${at}:todo`, inFlight: `${at}:in-flight`, tries: `${at}:tries`, results: `${at}:results` };
  },
  /** Sorted set of an account's batches of one client API (openai, anthropic), by creation time. */
  accountBatches: (account: string, api: string) => `${accountTag(account)}batches:${api}`,
  /** A stored file's hash (name, purpose, size, times; for a batch's output, the batch) and its content. */
  file: (account: string, id: string) => ({ meta: `${accountTag(account)}file:${id}`, content: `${accountTag(account)}file:${id}:content` }),
  /** Sorted set of an account's files by creation time. */
  accountFiles: (account: string) => `${accountTag(account)}files`,
  /** The same, of one purpose (batch, batch_output): complete while `accountFilesByPurposeBuilt` is set. */
  accountFilesOf: (account: string, purpose: string) => `${accountTag(account)}files:${purpose}`,
  /** Set for an hour once the account's files of each purpose were sorted from its list of all (file-store.ts). */
  accountFilesByPurposeBuilt: (account: string) => `${accountTag(account)}files:by-purpose`,
  /**
   * What an account keeps for its batches, counted (batches/stored-bytes.ts): each uploaded file's and batch's
   * lines' end (member → when Redis drops its data), and their sizes (member → bytes, and `#total`).
   */
  storedBytes: (account: string) => ({ items: `${accountTag(account)}stored`, sizes: `${accountTag(account)}stored:bytes` }),
  /** Sorted set of the batches with lines to run, fleet-wide, as "<account> <batch id>", by creation time. */
  activeBatches: `${P}batches:active`,
  /** Sorted set of an account's batches in the fleet's active set, by when each may run no longer: what its cap counts. */
  accountActiveBatches: (account: string) => `${accountTag(account)}active-batches`,
  /** Set when the demo account was made, so it is made once per Redis. */
  demoAccount: `${P}demo-account`,
  /** Stream of every operator action (CLI or admin API): actor, action, target, before, after. */
  audit: `${P}audit`,
  /** The key layout's version, set by `parley migrate`. */
  layoutVersion: `${P}layout-version`,
} as const;
