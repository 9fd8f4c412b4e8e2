// The routing file made ready to serve: each model id with its endpoints
// resolved (URL, key, dialect) and, where a tokenizer is known, a prompt
// counter. A table is immutable; a reload builds a new one and swaps it in.
import { type BillingSettings, type GatewaySettings, type ModelConfig, type PlatformSettings, type RateLimitSettings, type RoutingFile, type UpstreamKind } from '../config.js';
import { tokenPrices, type TokenPrices } from '../billing/prices.js';
import type { ServiceTier } from '../protocol/service-tier.js';
import { PromptCounter } from '../engine/prompt-counter.js';
import type { LocalEngines } from '../engine/supervisor.js';
import type { UpstreamEndpoint } from '../upstream/client.js';
import { DIALECTS } from '../upstream/dialects/index.js';

export interface RoutedEndpoint extends UpstreamEndpoint {
  /** Stable name for health and logs: the model id and the endpoint's URL. */
  name: string;
  kind: UpstreamKind;
  upstreamModel: string;
  priority: number;
  weight: number;
  maxConcurrent: number;
  maxQueue: number;
  /** Send each request its tier's priority (the dialect's priorityOf). */
  priorityScheduling: boolean;
}

export interface RoutedModel {
  config: ModelConfig;
  /** Each service tier's prices. */
  prices: Record<ServiceTier, TokenPrices>;
  endpoints: RoutedEndpoint[];
  /** The model's own tokenizer, where it has one (a local engine's, or `tokenizer:` in its entry). */
  promptCounter: PromptCounter | undefined;
}

export interface RoutingTable {
  settings: GatewaySettings;
  billing: BillingSettings;
  rateLimits: RateLimitSettings;
  platform: PlatformSettings;
  models: Map<string, RoutedModel>;
  /** Exact aliases, and `*` patterns in file order (ModelConfig.aliases). */
  aliases: { exact: Map<string, RoutedModel>; patterns: [RegExp, RoutedModel][] };
}

/** Each tier's prices: the routing file's, else the model's (flex: half of them). */
function tierPrices(config: ModelConfig): Record<ServiceTier, TokenPrices> {
  const base = config.pricesPerMillion;
  const half = { inputCacheMiss: base.inputCacheMiss / 2, inputCacheHit: base.inputCacheHit / 2, output: base.output / 2 };
  return {
    default: tokenPrices(base),
    flex: tokenPrices(config.tierPrices.flex ?? half),
    priority: tokenPrices(config.tierPrices.priority ?? base),
  };
}

/** The model a request names: by its id, else by an exact alias, else by the first pattern that matches. */
export function findModel(table: RoutingTable, name: string): RoutedModel | undefined {
  return table.models.get(name) ?? table.aliases.exact.get(name) ?? table.aliases.patterns.find(([pattern]) => pattern.test(name))?.[1];
}

/** Whether `name` is a model's id or exact alias: one of the names the routing file lists (a pattern alias matches names a client makes up). */
export const isNamedInTable = (table: RoutingTable, name: string) => table.models.has(name) || table.aliases.exact.has(name);

const aliasPattern = (glob: string) => new RegExp(`^${glob.split('*').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);

function aliasesOf(models: Iterable<RoutedModel>): RoutingTable['aliases'] {
  const aliases: RoutingTable['aliases'] = { exact: new Map(), patterns: [] };
  for (const model of models) {
    for (const alias of model.config.aliases) {
      if (alias.includes('*')) aliases.patterns.push([aliasPattern(alias), model]);
      else if (!aliases.exact.has(alias)) aliases.exact.set(alias, model);
    }
  }
  return aliases;
}

const counters = new Map<string, Promise<PromptCounter>>();

function promptCounter(gguf: string) {
  let counter = counters.get(gguf);
  if (!counter) {
    counter = PromptCounter.load(gguf);
    counters.set(gguf, counter);
    counter.catch(() => counters.delete(gguf));
  }
  return counter;
}

export async function buildRoutingTable(file: RoutingFile, engines: LocalEngines): Promise<RoutingTable> {
  const models = new Map<string, RoutedModel>();
  for (const config of file.models) {
    let tokenizer = config.tokenizer?.gguf;
    const endpoints: RoutedEndpoint[] = [];
    for (const e of config.endpoints) {
      let url = e.url?.replace(/\/+$/, '');
      if (e.local) {
        const engine = await engines.start(e.local, e.upstreamModel ?? config.id);
        url = engine.url;
        tokenizer ??= engine.modelPath;
      }
      const apiKey = e.apiKeyEnv ? process.env[e.apiKeyEnv] : undefined;
      if (e.apiKeyEnv && !apiKey) console.warn(`parley: ${config.id}: environment variable ${e.apiKeyEnv} is not set; calling ${url} without a key`);
      endpoints.push({
        name: `${config.id} ${url}`,
        kind: e.kind,
        url: url!,
        upstreamModel: e.upstreamModel ?? config.id,
        apiKey,
        dialect: DIALECTS[e.kind],
        priority: e.priority,
        weight: e.weight,
        maxConcurrent: e.maxConcurrent,
        maxQueue: e.maxQueue,
        priorityScheduling: e.priorityScheduling,
      });
    }
    const unsalted = [...new Set(endpoints.filter((e) => !e.dialect.saltsPrefixCache).map((e) => e.kind))];
    if (config.routing.prefixCache === 'per-account' && unsalted.length > 0) {
      console.warn(`parley: ${config.id}: ${unsalted.join(' and ')} endpoints keep one prefix cache for every account, whose cached tokens and speed show one account what another sent; vllm, sglang and parley-engine keep each account's apart`);
    }
    models.set(config.id, { config, prices: tierPrices(config), endpoints, promptCounter: tokenizer ? await promptCounter(tokenizer) : undefined });
  }
  return { settings: file.gateway, billing: file.billing, rateLimits: file.rateLimits, platform: file.platform, models, aliases: aliasesOf(models.values()) };
}
