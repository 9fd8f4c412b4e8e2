// The routing file operators edit: which model ids Parley serves, where each
// one's upstream endpoints are, its context window, prices and page text.
// Validated with zod; an error names the file, line and field. Watched, and
// swapped in whole when a valid new version appears: requests in flight keep
// the version they started with.
import { readFileSync, watch, type FSWatcher } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { LineCounter, parseDocument, isNode } from 'yaml';
import { z } from 'zod';
import { ConfigError } from './config-error.js';
import { isProxyEntry } from './platform/client-address.js';
import { chatCompletionRequest } from './protocol/chat-request.js';

/** The APIs a model may serve: chat completions, text completions, embeddings. */
export const API_NAMES = ['chat', 'completions', 'embeddings'] as const;
export type ApiName = (typeof API_NAMES)[number];

/** The APIs clients call, as usage events name them: a model's own, and Anthropic's Messages and OpenAI's Responses, which chat models serve. */
export type ClientApi = ApiName | 'messages' | 'responses';

/** The ways of choosing an endpoint, one module each in routing/policies/. */
export const POLICY_NAMES = ['prefix-affinity', 'least-load', 'round-robin'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export const UPSTREAM_KINDS = ['openai', 'vllm', 'sglang', 'llamacpp', 'deepseek', 'parley-engine'] as const;
export type UpstreamKind = (typeof UPSTREAM_KINDS)[number];

const localEngine = z.strictObject({
  /** A GGUF file; absent means Parley's own generated model. */
  model: z.string().optional(),
  contextSize: z.int().min(256).optional(),
  parallel: z.int().min(1).max(64).optional(),
  /** CPU threads; by default 1 for a model under 256 MB, else one per core (engine/llama.ts). */
  threads: z.int().min(1).max(1024).optional(),
});

const endpoint = z
  .strictObject({
    kind: z.enum(UPSTREAM_KINDS),
    /** Base URL up to and including the version prefix, e.g. http://vllm-0:8000/v1 */
    url: z.url({ protocol: /^https?$/ }).optional(),
    /** The model's name on that upstream; defaults to the model id. */
    upstreamModel: z.string().min(1).optional(),
    /** Name of the environment variable that holds the upstream's API key. */
    apiKeyEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).optional(),
    /** Instead of url: Parley starts and supervises a `parley engine` for this endpoint. */
    local: localEngine.optional(),
    /** Lower is preferred: endpoints of the next priority serve only when all of this one cannot. */
    priority: z.int().min(0).default(0),
    /** Relative capacity among endpoints of one priority. */
    weight: z.number().positive().default(1),
    /** Requests at once (protects the GPUs); more wait in a queue of `maxQueue`. */
    maxConcurrent: z.int().positive().default(256),
    maxQueue: z.int().min(0).default(256),
    /** The upstream schedules by request priority (vLLM started with --scheduling-policy priority): each tier's is sent. */
    priorityScheduling: z.boolean().default(false),
  })
  .check((ctx) => {
    if (ctx.value.priorityScheduling && ctx.value.kind !== 'vllm') {
      ctx.issues.push({ code: 'custom', input: ctx.value, path: ['priorityScheduling'], message: 'only a vllm endpoint takes a request priority' });
    }
    if ((ctx.value.url === undefined) === (ctx.value.local === undefined)) {
      ctx.issues.push({ code: 'custom', input: ctx.value, path: ['url'], message: 'give exactly one of `url` or `local`' });
    }
  });

const prices = z.strictObject({
  inputCacheMiss: z.number().nonnegative(),
  inputCacheHit: z.number().nonnegative(),
  output: z.number().nonnegative(),
});

const model = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]*$/, 'letters, digits and . _ : / - only'),
  contextWindow: z.int().positive(),
  /**
   * Other names clients may call it by, on every API: exact names, or `*`
   * patterns (`claude-*-haiku-*`) for the names tools hard-code. A model's
   * own id comes first, then exact aliases, then patterns in file order.
   */
  aliases: z.array(z.string().regex(/^[A-Za-z0-9*][A-Za-z0-9._:/*@\[\]-]*$/, 'letters, digits, . _ : / @ [ ] - and * only')).default([]),
  pricesPerMillion: prices,
  /** Prices of a service tier where they differ from the default: flex is half of pricesPerMillion unless given here. */
  tierPrices: z.strictObject({ flex: prices.optional(), priority: prices.optional() }).default({}),
  supports: z.strictObject({ tools: z.boolean().default(false), jsonOutput: z.boolean().default(false) }).prefault({}),
  /** A GGUF whose tokenizer and chat template count prompt tokens before any upstream call. */
  tokenizer: z.strictObject({ gguf: z.string() }).optional(),
  description: z.string().default(''),
  setup: z.string().default(''),
  /**
   * Instructions for coding agents that take their system prompt from the gateway's model catalog (Codex does,
   * with a provider whose `auth` is a command). Such a catalog must carry them, so a model without them is left
   * out of it: Codex then keeps its own instructions and learns no window from Parley.
   */
  agentInstructions: z.string().min(1).optional(),
  /** The APIs this model's endpoints serve; a request to another is refused before any upstream call. */
  api: z.array(z.enum(API_NAMES)).min(1).default(['chat']),
  /** Engine extras clients may send this model's endpoints unchanged (top_k, min_p, chat_template_kwargs, ...); others are ignored. */
  passThrough: z
    .array(z.string().regex(/^[a-z_][a-z0-9_]*$/, 'a request field name'))
    .default([])
    .check((ctx) => {
      const taken = ctx.value.filter((f) => f in chatCompletionRequest.shape);
      if (taken.length > 0) ctx.issues.push({ code: 'custom', input: ctx.value, message: `${taken.join(', ')} ${taken.length === 1 ? 'is a field' : 'are fields'} Parley itself reads, not an engine extra` });
    }),
  routing: z
    .strictObject({
      policy: z.enum(POLICY_NAMES).default('prefix-affinity'),
      /** Prefix affinity spills a request from a prefix's home busier than this many times the mean load... */
      loadFactor: z.number().min(1).default(1.25),
      /** ... and busier than the mean by this many requests. */
      maxImbalance: z.int().min(0).default(4),
      /** How far past its even share of prefixes an endpoint may be home to more (when there are many). */
      placementSlack: z.number().min(0).max(4).default(0.25),
      /**
       * The engines' prefill rate, prompt tokens a second: what reading a prefix again on another endpoint costs,
       * against waiting in its home engine's queue (routing/endpoint-score.ts).
       */
      prefillTokensPerSecond: z.number().positive().default(10_000),
      /** Whose requests may read one another's prefix cache: each account its own, or all (accounts/cache-salt.ts). */
      prefixCache: z.enum(['per-account', 'shared']).default('per-account'),
    })
    .prefault({}),
  endpoints: z.array(endpoint).min(1),
});

const gatewaySettings = z
  .strictObject({
    keepAliveMs: z.int().min(10).default(15_000),
    upstreamFirstByteTimeoutMs: z.int().min(10).default(60_000),
    upstreamIdleTimeoutMs: z.int().min(10).default(60_000),
    maxBodyBytes: z.int().min(1024).default(4 * 1024 * 1024),
    /**
     * The most bytes of request bodies one account's requests may hold on a replica at once, read or being read
     * (gateway/body-budget.ts), with the stored files their batch creates read and the parts their downloads
     * hold: past it a request is refused (429) as its bytes arrive. Keep it above a batch file's 32 MiB.
     */
    bodyBytesPerAccount: z.int().min(1024).default(128 * 1024 * 1024),
    /**
     * The longest a client may take to send a request, headers and body, on any route: then 408 and the
     * connection is closed (a stalled body must not hold a socket for ever). Read when the replica starts.
     */
    requestReadTimeoutMs: z.int().min(1000).default(30_000),
    /**
     * The longest a client may take none of its reply's bytes while some wait for it (a stream, a download, a whole
     * reply): then the connection is closed, as nginx's send_timeout does, so that a client that stops reading holds
     * no endpoint slot, credit hold, upstream connection or reply in memory for ever. A stream cut so is a client
     * gone: charged nothing.
     */
    clientSendTimeoutMs: z.int().min(100).default(60_000),
    /** On SIGTERM, how long requests in flight may run on; keep it under the pod's termination grace period. */
    shutdownGraceMs: z.int().min(0).default(25_000),
    /**
     * Tokens by account on /metrics (`parley_account_tokens`): the this many accounts that used the most since the
     * replica started, each its own series, the rest summed as `other`; 0, the default, keeps accounts off metrics.
     */
    metricsTopAccounts: z.int().min(0).max(1000).default(0),
    /** A JSON line on stdout per generation request (time, ids, model, endpoint, status, tokens, cost, latency, attempts). */
    requestLog: z.boolean().default(true),
    /** A request header that names the client's session (its cache), for prefix affinity to route by; Claude Code's is always read. */
    sessionHeader: z.string().regex(/^[A-Za-z0-9-]+$/, 'a header name').toLowerCase().optional(),
    /**
     * Reading each engine's own load (vLLM's, SGLang's and llama.cpp's metrics; Parley's engine's): once per
     * `intervalMs` per endpoint for the whole fleet (0 turns it off), each read given up after `timeoutMs`.
     */
    engineLoad: z
      .strictObject({ intervalMs: z.int().min(0).default(1_000), timeoutMs: z.int().min(10).default(500) })
      .prefault({}),
    /**
     * Batch jobs (OpenAI's Batch API, Anthropic's Message Batches), run at the flex tier: at most `concurrency`
     * lines in flight per replica (0: this replica runs none, but still takes and answers batches; it claims more
     * only while few of its lines wait for a slot), each claimed for `leaseMs`, renewed while it runs, after which
     * a lost line runs again; `completionWindowS`: the time a
     * batch's `24h` window gives it; `keepDays`: how long files, ended batches and their results are kept;
     * `storedBytesPerAccount`: the most bytes one account may keep in Redis for its batches, its uploaded files and
     * its batches' lines (batches/stored-bytes.ts).
     */
    batches: z
      .strictObject({
        concurrency: z.int().min(0).default(256),
        leaseMs: z.int().min(1000).default(30_000),
        completionWindowS: z.int().min(1).default(86_400),
        keepDays: z.number().positive().default(30),
        storedBytesPerAccount: z.int().min(1).default(256 * 1024 * 1024),
      })
      .prefault({}),
    failover: z
      .strictObject({
        /** Endpoints tried per request before its first byte. */
        maxAttempts: z.int().min(1).default(3),
        /** All attempts of one request, queueing included, end by this deadline. */
        deadlineMs: z.int().min(10).default(60_000),
        /** The longest a request waits for a slot on a full endpoint. */
        queueTimeoutMs: z.int().min(0).default(10_000),
        /** The longest a flex request waits (it waits behind every other tier); then 429 resource_unavailable. */
        flexQueueTimeoutMs: z.int().min(0).default(60_000),
        /** The share of an endpoint's queue one account's requests may take (at least one place). */
        accountQueueShare: z.number().gt(0).max(1).default(0.5),
      })
      .prefault({}),
    health: z
      .strictObject({
        /**
         * An endpoint's circuit opens when, within `windowMs`, it has this many failures, making up at least
         * `failureRate` of its outcomes, from at least `minCallers` accounts (the active probe counts as one);
         * or this many failed probes in a row; or at once on a refused connection.
         */
        failureThreshold: z.int().min(1).default(3),
        failureRate: z.number().gt(0).max(1).default(0.5),
        windowMs: z.int().min(100).default(10_000),
        minCallers: z.int().min(1).default(2),
        /** How long an open circuit stays open before one request or probe tests it. */
        openMs: z.int().min(10).default(5_000),
        /** Active check: GET <endpoint url><path> every intervalMs (0 turns it off). */
        probe: z
          .strictObject({ path: z.string().startsWith('/').default('/models'), intervalMs: z.int().min(0).default(5_000), timeoutMs: z.int().min(10).default(2_000) })
          .prefault({}),
      })
      .prefault({}),
  })
  .prefault({});

const billingSettings = z
  .strictObject({
    /** The currency balances are shown in. */
    currency: z.string().regex(/^[A-Z]{3}$/, 'a three-letter currency code').default('USD'),
    /** How long a hold outlives the last sign of life from the replica serving its request. */
    holdTtlMs: z.int().min(500).default(120_000),
    /** Credit for the demo account `parley serve` makes on a fresh private Redis; 0 makes none. */
    demoCredit: z.number().nonnegative().default(10),
    /** How long each request's usage event is kept; without it, for good. Daily totals are kept 400 days regardless. */
    usageRetentionDays: z.int().positive().optional(),
  })
  .prefault({});

const rateLimitSettings = z
  .strictObject({
    /** Per account, whichever of its keys a request comes with; an operator may set other limits per account. */
    requestsPerMinute: z.int().positive().default(1_000),
    /** Counted at admission: prompt tokens plus the most the reply may take. */
    tokensPerMinute: z.int().positive().default(2_000_000),
    /**
     * Requests in flight at once, fleet-wide: a request counts from its credit hold until its settlement lands, a
     * few ms after its last byte. 0, the default, sets none.
     */
    concurrentRequests: z.int().min(0).default(0),
  })
  .prefault({});

const platformSettings = z
  .strictObject({
    /** Whether anyone may sign up; otherwise an operator makes accounts (`parley accounts create --password`). */
    signup: z.boolean().default(true),
    /**
     * The proxies in front of the replicas (addresses or CIDR ranges) whose X-Forwarded-For is believed, so that
     * log-ins and sign-ups are counted per client rather than per proxy (platform/client-address.ts).
     */
    trustedProxies: z.array(z.string().refine(isProxyEntry, 'an IP address or a CIDR range (10.0.0.0/8)')).default([]),
  })
  .prefault({});

const routingFile = z
  .strictObject({ gateway: gatewaySettings, billing: billingSettings, rateLimits: rateLimitSettings, platform: platformSettings, models: z.array(model).min(1) })
  .check((ctx) => {
    const seen = new Set<string>();
    ctx.value.models.forEach((m, i) => {
      if (seen.has(m.id)) ctx.issues.push({ code: 'custom', input: m.id, path: ['models', i, 'id'], message: `model id "${m.id}" appears twice` });
      seen.add(m.id);
    });
  });

export type RoutingFile = z.infer<typeof routingFile>;
export type ModelConfig = z.infer<typeof model>;
export type LocalEngineConfig = z.infer<typeof localEngine>;
export type GatewaySettings = z.infer<typeof gatewaySettings>;
export type BillingSettings = z.infer<typeof billingSettings>;
export type RateLimitSettings = z.infer<typeof rateLimitSettings>;
export type PlatformSettings = z.infer<typeof platformSettings>;


function fieldPath(path: PropertyKey[]): string {
  return path.map((k) => (typeof k === 'number' ? `[${k}]` : `.${String(k)}`)).join('').replace(/^\./, '');
}

/** Parses and validates routing-file text. Relative paths resolve against `baseDir`. */
export function parseRoutingFile(text: string, source: string, baseDir: string): RoutingFile {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false });
  if (doc.errors.length > 0) {
    const e = doc.errors[0];
    const { line, col } = lineCounter.linePos(e.pos[0]);
    throw new ConfigError(`${source}:${line}:${col}: ${e.message.split('\n')[0]}`);
  }
  const parsed = routingFile.safeParse(doc.toJS());
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    // Point at the deepest node of the path that exists in the file.
    let line = 1;
    for (let n = issue.path.length; n >= 0; n--) {
      const found = doc.getIn(issue.path.slice(0, n) as unknown[], true);
      if (isNode(found) && found.range) {
        line = lineCounter.linePos(found.range[0]).line;
        break;
      }
    }
    throw new ConfigError(`${source}:${line}: ${fieldPath(issue.path) || '(top level)'}: ${issue.message}`);
  }
  const config = parsed.data;
  for (const m of config.models) {
    if (m.tokenizer) m.tokenizer.gguf = resolve(baseDir, m.tokenizer.gguf);
    for (const e of m.endpoints) if (e.local?.model) e.local.model = resolve(baseDir, e.local.model);
  }
  return config;
}

export function loadRoutingFile(path: string): RoutingFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read routing file ${path}: ${(err as Error).message}`);
  }
  return parseRoutingFile(text, path, dirname(resolve(path)));
}

/**
 * Calls `onChange` with each new valid version of the file, and `onError`
 * with each invalid one (the caller keeps serving the last good version).
 * The folder is watched, not the file, so that editors that replace the file
 * and Kubernetes ConfigMap symlink swaps are both seen.
 */
export function watchRoutingFile(path: string, onChange: (c: RoutingFile) => void, onError: (e: Error) => void): FSWatcher {
  const abs = resolve(path);
  let lastText = readFileSync(abs, 'utf8');
  let timer: NodeJS.Timeout | undefined;
  const check = () => {
    let text: string;
    try {
      text = readFileSync(abs, 'utf8');
    } catch {
      return; // mid-replace; the next event brings the new file
    }
    if (text === lastText) return;
    lastText = text;
    try {
      onChange(parseRoutingFile(text, abs, dirname(abs)));
    } catch (err) {
      onError(err as Error);
    }
  };
  const watcher = watch(dirname(abs), (_event, name) => {
    if (name && name !== basename(abs) && !name.startsWith('..')) return;
    clearTimeout(timer);
    timer = setTimeout(check, 50);
  });
  watcher.on('close', () => clearTimeout(timer));
  return watcher;
}
