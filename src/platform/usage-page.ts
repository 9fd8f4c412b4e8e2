// Usage by day and model, filtered by key and dates (from the daily totals),
// and its CSV download (from the usage events).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { listApiKeys, maskedKey } from '../accounts/api-keys.js';
import { DAILY_TOTALS_KEPT_DAYS, utcDay } from '../billing/credit-ledger.js';
import { formatMicros } from '../billing/prices.js';
import { readUsageEvents, usageCsv } from '../billing/usage-events.js';
import { sendDownload } from '../protocol/http-io.js';
import type { PlatformServices } from './services.js';
import { html } from './html.js';
import { page, sendPage } from './layout.js';
import { csrfToken, type Session } from './sessions.js';
import { daysBetween, usageByDayAndModel } from './usage-data.js';

interface UsageFilter {
  key?: string;
  from: string;
  to: string;
  since: number;
  until: number;
}

function readFilter(query: URLSearchParams): UsageFilter {
  const valid = (d: string | null) => (d && /^\d{4}-\d{2}-\d{2}$/.test(d) && !Number.isNaN(Date.parse(d)) ? d : undefined);
  const to = valid(query.get('to')) ?? utcDay(Date.now());
  const from = valid(query.get('from')) ?? utcDay(Date.parse(to) - 29 * 86_400_000);
  const key = query.get('key') || undefined;
  return { key, from, to, since: Date.parse(`${from}T00:00:00Z`), until: Date.parse(`${to}T00:00:00Z`) + 86_400_000 - 1 };
}

export async function showUsage(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session, query: URLSearchParams): Promise<void> {
  const filter = readFilter(query);
  const currency = ctx.routing().billing.currency;
  const keys = await listApiKeys(ctx.redis, session.account);
  const days = daysBetween(filter.from, filter.to);
  const rows = await usageByDayAndModel(ctx.redis, session.account, days, filter.key);
  const csvQuery = new URLSearchParams({ from: filter.from, to: filter.to, ...(filter.key ? { key: filter.key } : {}) });
  const body = html`<h1>Usage</h1>
    <form method="get" action="/platform/usage" class="filters">
      <div><label for="key">Key</label><select id="key" name="key"><option value="">All keys</option>
        ${keys.map((k) => html`<option value="${k.id}"${k.id === filter.key ? html` selected` : ''}>${k.name} (${maskedKey(k.suffix)})</option>`)}</select></div>
      <div><label for="from">From</label><input id="from" name="from" type="date" value="${filter.from}"></div>
      <div><label for="to">To</label><input id="to" name="to" type="date" value="${filter.to}"></div>
      <div><button type="submit" class="secondary">Show</button> <a class="button" href="/platform/usage.csv?${csvQuery.toString()}">Download CSV</a></div>
    </form>
    ${rows.length
      ? html`<table data-testid="usage-table"><thead><tr><th>Day</th><th>Model</th><th>API</th><th>Tier</th><th class="num">Requests</th><th class="num">Prompt tokens</th>
          <th class="num">Cached tokens</th><th class="num">Completion tokens</th><th class="num">Cost (${currency})</th></tr></thead><tbody>
          ${rows.map((r) => html`<tr><td>${r.day}</td><td>${r.model}</td><td>${API_NAMES_SHOWN[r.api as keyof typeof API_NAMES_SHOWN] ?? r.api}</td><td>${r.tier}</td><td class="num">${r.requests}</td><td class="num">${r.promptTokens}</td>
            <td class="num">${r.cachedTokens}</td><td class="num">${r.completionTokens}</td><td class="num">${formatMicros(r.cost, 6)}</td></tr>`)}
        </tbody></table>`
      : html`<p class="muted">No charged requests in this period.</p>`}
    ${days.length > 0 && days[0] !== filter.from ? html`<p class="muted">Totals are kept for ${DAILY_TOTALS_KEPT_DAYS} days: the table starts on ${days[0]}; the CSV has every event kept.</p>` : ''}`;
  sendPage(res, 200, page({ title: 'Usage', email: session.email, csrf: csrfToken(req, res), active: 'usage' }, body));
}

const API_NAMES_SHOWN = { chat: 'Chat', completions: 'Completions', embeddings: 'Embeddings', messages: 'Messages', responses: 'Responses' };

export async function downloadUsageCsv(res: ServerResponse, ctx: PlatformServices, session: Session, query: URLSearchParams): Promise<void> {
  const filter = readFilter(query);
  const headers = { 'content-type': 'text/csv; charset=utf-8', 'content-disposition': `attachment; filename="parley-usage-${filter.from}-to-${filter.to}.csv"`, 'cache-control': 'no-store' };
  const lines = usageCsv(readUsageEvents(ctx.redis, session.account, { key: filter.key, since: filter.since, until: filter.until }));
  await sendDownload(res, headers, lines, ctx.routing().settings.clientSendTimeoutMs, { allowance: ctx.bodies.allowance(session.account, res) });
}
