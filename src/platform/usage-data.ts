// Usage as the platform shows it, from the daily totals settlement keeps:
// per day for the overview chart, and per day, model, API and tier (of one
// key, or all) for the usage page.
import type { Redis } from 'ioredis';
import { DAILY_TOTALS_KEPT_DAYS, utcDay } from '../billing/credit-ledger.js';
import { redisKeys } from '../redis/keys.js';

export interface DayTotals {
  day: string;
  requests: number;
  cachedInput: number;
  uncachedInput: number;
  output: number;
  cost: number;
}

export function lastDays(count: number, now = Date.now()): string[] {
  return Array.from({ length: count }, (_, i) => utcDay(now - (count - 1 - i) * 86_400_000));
}

/** The days from `from` to `to` (YYYY-MM-DD, both included), at most the last DAILY_TOTALS_KEPT_DAYS of them: totals are not kept longer. */
export function daysBetween(from: string, to: string): string[] {
  const count = Math.floor((Date.parse(to) - Date.parse(from)) / 86_400_000) + 1;
  return count > 0 ? lastDays(Math.min(count, DAILY_TOTALS_KEPT_DAYS), Date.parse(to)) : [];
}

/** Each day's totals hash (field → total), the account's or, with `key`, that key's: one pipelined read. */
async function readDays(redis: Redis, account: string, days: string[], key?: string): Promise<Record<string, string>[]> {
  const pipeline = redis.pipeline();
  for (const day of days) pipeline.hgetall(key ? redisKeys.keyDailyUsage(account, key, day) : redisKeys.dailyUsage(account, day));
  const results = (await pipeline.exec()) ?? [];
  return days.map((_, i) => (results[i]?.[1] ?? {}) as Record<string, string>);
}

export async function dailyTotals(redis: Redis, account: string, days: string[]): Promise<DayTotals[]> {
  const read = await readDays(redis, account, days);
  return days.map((day, i) => {
    const fields = read[i];
    const t: DayTotals = { day, requests: 0, cachedInput: 0, uncachedInput: 0, output: 0, cost: 0 };
    for (const [field, value] of Object.entries(fields)) {
      const metric = field.slice(field.lastIndexOf('\t') + 1);
      const n = Number(value);
      if (metric === 'requests') t.requests += n;
      else if (metric === 'prompt_tokens') t.uncachedInput += n;
      else if (metric === 'cached_tokens') {
        t.cachedInput += n;
        t.uncachedInput -= n;
      } else if (metric === 'completion_tokens') t.output += n;
      else if (metric === 'cost') t.cost += n;
    }
    return t;
  });
}

export interface UsageRow {
  day: string;
  model: string;
  api: string;
  tier: string;
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  cost: number;
}

/** Where a day's totals came from before they were grouped by API, tier and key: those are not known. */
export const NOT_RECORDED = '—';

/**
 * Charged requests by day, model, API and service tier, newest day first,
 * from the daily totals (one hash a day), not from the usage events: a
 * month of a busy account is millions of events, seconds of a replica's CPU
 * at every view of the page. With `key`, that key's totals.
 */
export async function usageByDayAndModel(redis: Redis, account: string, days: string[], key?: string): Promise<UsageRow[]> {
  const read = await readDays(redis, account, days, key);
  const rows = new Map<string, UsageRow>();
  days.forEach((day, i) => {
    for (const [field, value] of Object.entries(read[i])) {
      const parts = field.split('\t');
      const metric = parts.pop();
      const [model, api = NOT_RECORDED, tier = NOT_RECORDED] = parts;
      const id = `${day}\t${model}\t${api}\t${tier}`;
      let row = rows.get(id);
      if (!row) rows.set(id, (row = { day, model, api, tier, requests: 0, promptTokens: 0, cachedTokens: 0, completionTokens: 0, cost: 0 }));
      const n = Number(value);
      if (metric === 'requests') row.requests += n;
      else if (metric === 'prompt_tokens') row.promptTokens += n;
      else if (metric === 'cached_tokens') row.cachedTokens += n;
      else if (metric === 'completion_tokens') row.completionTokens += n;
      else if (metric === 'cost') row.cost += n;
    }
  });
  return [...rows.values()].sort((a, b) => b.day.localeCompare(a.day) || a.model.localeCompare(b.model) || a.api.localeCompare(b.api) || a.tier.localeCompare(b.tier));
}
