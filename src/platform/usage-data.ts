// Usage as the platform shows it: per day (from the daily totals settlement
// keeps) for the overview chart, and per day and model (from the usage
// events, so it can be filtered by key) for the usage page.
import type { Redis } from 'ioredis';
import { utcDay } from '../billing/credit-ledger.js';
import { readUsageEvents } from '../billing/usage-events.js';
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

export async function dailyTotals(redis: Redis, account: string, days: string[]): Promise<DayTotals[]> {
  const pipeline = redis.pipeline();
  for (const day of days) pipeline.hgetall(redisKeys.dailyUsage(account, day));
  const results = (await pipeline.exec()) ?? [];
  return days.map((day, i) => {
    const fields = (results[i]?.[1] ?? {}) as Record<string, string>;
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

/** Charged requests by day, model, API and service tier, newest day first. */
export async function usageByDayAndModel(redis: Redis, account: string, filter: { key?: string; since: number; until: number }): Promise<UsageRow[]> {
  const rows = new Map<string, UsageRow>();
  for await (const e of readUsageEvents(redis, account, { key: filter.key, since: filter.since, until: filter.until })) {
    if (e.outcome !== 'complete') continue;
    const day = utcDay(e.time);
    const id = `${day}\t${e.model}\t${e.api}\t${e.tier}`;
    const row = rows.get(id) ?? { day, model: e.model, api: e.api, tier: e.tier, requests: 0, promptTokens: 0, cachedTokens: 0, completionTokens: 0, cost: 0 };
    row.requests++;
    row.promptTokens += e.promptTokens;
    row.cachedTokens += e.cachedTokens;
    row.completionTokens += e.completionTokens;
    row.cost += e.charged;
    rows.set(id, row);
  }
  return [...rows.values()].sort((a, b) => b.day.localeCompare(a.day) || a.model.localeCompare(b.model) || a.api.localeCompare(b.api) || a.tier.localeCompare(b.tier));
}
