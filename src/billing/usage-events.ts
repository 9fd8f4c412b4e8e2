// Reading the usage events settlement appends, for exports and the platform.
// Each account has a stream of its own, so that reading one account's usage
// costs what that account used, not what every account did.
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { formatMicros } from './prices.js';

export interface UsageEvent {
  time: number;
  /** The request's id as its client was given it (`x-request-id`). */
  requestId: string;
  /** The reply's id (`chatcmpl-…`, `msg_…`), or '' for a request that got none. */
  replyId: string;
  account: string;
  key: string;
  model: string;
  endpoint: string;
  outcome: string;
  reason: string;
  /** The end user the client named, or ''. */
  user: string;
  /** The API the request came through (events from before APIs were recorded are chat's). */
  api: string;
  /** The service tier that served it (events from before tiers are default's). */
  tier: string;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  /** Micro-units: what the reply cost, and what was charged (less only when the balance ran out). */
  cost: number;
  charged: number;
}

function toEvent(id: string, fields: string[]): UsageEvent {
  const f: Record<string, string> = {};
  for (let i = 0; i < fields.length; i += 2) f[fields[i]] = fields[i + 1];
  return {
    time: Number(id.split('-')[0]),
    requestId: f.request_id,
    replyId: f.reply_id ?? '',
    account: f.account,
    key: f.key,
    model: f.model,
    endpoint: f.endpoint,
    outcome: f.outcome,
    reason: f.reason,
    user: f.user ?? '',
    api: f.api || 'chat',
    tier: f.service_tier || 'default',
    promptTokens: Number(f.prompt_tokens),
    cachedTokens: Number(f.cached_tokens),
    completionTokens: Number(f.completion_tokens),
    cost: Number(f.cost),
    charged: Number(f.charged),
  };
}

export interface UsageFilter {
  key?: string;
  /** Milliseconds since the epoch, inclusive. */
  since?: number;
  until?: number;
}

/** An account's events in time order, read from its stream in pages. */
export async function* readUsageEvents(redis: Redis, account: string, filter: UsageFilter = {}): AsyncGenerator<UsageEvent> {
  // A stream's ids start at 0: a day before 1970 asked for is the stream's start, not an invalid range.
  let start = filter.since !== undefined ? String(Math.max(0, filter.since)) : '-';
  const end = filter.until !== undefined ? String(Math.max(0, filter.until)) : '+';
  for (;;) {
    const page = (await redis.xrange(redisKeys.usageEvents(account), start, end, 'COUNT', 1000)) as [string, string[]][];
    for (const [id, fields] of page) {
      const event = toEvent(id, fields);
      if (filter.key && event.key !== filter.key) continue;
      yield event;
    }
    if (page.length < 1000) return;
    start = `(${page[page.length - 1][0]}`;
  }
}

const CSV_COLUMNS = 'time,request_id,account,key,model,endpoint,outcome,reason,prompt_tokens,cached_tokens,completion_tokens,cost,charged,user,api,reply_id,service_tier';

/**
 * A CSV field: quoted where it holds a separator, and one that a spreadsheet
 * would run as a formula (it starts with =, +, -, @, a tab or a carriage
 * return: a client's `user` may be `=HYPERLINK(...)`) is prefixed with a
 * single quote, as OWASP's CSV-injection guidance says.
 */
function csvField(v: string): string {
  const text = /^[=+\-@\t\r]/.test(v) ? `'${v}` : v;
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export async function* usageCsv(events: AsyncIterable<UsageEvent>): AsyncGenerator<string> {
  yield `${CSV_COLUMNS}\n`;
  for await (const e of events) {
    const row = [
      new Date(e.time).toISOString(), e.requestId, e.account, e.key, e.model, e.endpoint, e.outcome, e.reason,
      String(e.promptTokens), String(e.cachedTokens), String(e.completionTokens), formatMicros(e.cost, 6), formatMicros(e.charged, 6), e.user, e.api, e.replyId, e.tier,
    ];
    yield `${row.map(csvField).join(',')}\n`;
  }
}
