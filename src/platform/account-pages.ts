// The signed-in pages about the account itself: the overview (balance,
// held, this month's spend, the 30-day chart), API keys (created with their
// limits and shown once, masked afterwards, limits changed, spend against
// budget shown, revoked with a confirmation) and top-up. Key changes are the
// operator's operations (operator/operations.ts), audited as the member.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { BUDGET_PERIODS, maskedKey } from '../accounts/api-keys.js';
import { SERVICE_TIERS } from '../protocol/service-tier.js';
import { OperationRefused, operations, type Operator } from '../operator/operations.js';
import { redeemCreditCode } from '../billing/credit-codes.js';
import { balanceSummary } from '../billing/credit-ledger.js';
import { formatMicros } from '../billing/prices.js';
import type { PlatformServices } from './services.js';
import { html, type Html } from './html.js';
import { page, redirect, sendPage } from './layout.js';
import { csrfToken, type Session } from './sessions.js';
import { usageChart } from './usage-chart.js';
import { dailyTotals, lastDays } from './usage-data.js';

const when = (ms: number | null) => (ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 16) + ' UTC' : 'never');

export async function showOverview(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session): Promise<void> {
  const currency = ctx.routing().billing.currency;
  const balance = await balanceSummary(ctx.redis, session.account);
  // 31 days cover both the 30-day chart and every day of this month so far.
  const recent = await dailyTotals(ctx.redis, session.account, lastDays(31));
  const days = recent.slice(1);
  const month = new Date().toISOString().slice(0, 7);
  const monthSpend = recent.filter((d) => d.day.startsWith(month)).reduce((sum, d) => sum + d.cost, 0);
  const body = html`<h1>Overview</h1>
    <div class="cards">
      <div class="card"><div class="label">Available balance</div><div class="value" data-testid="available-balance">${formatMicros(balance.available)} ${currency}</div></div>
      <div class="card"><div class="label">Held by requests in flight</div><div class="value" data-testid="held-balance">${formatMicros(balance.held)} ${currency}</div></div>
      <div class="card"><div class="label">Spent this month</div><div class="value" data-testid="month-spend">${formatMicros(monthSpend)} ${currency}</div></div>
    </div>
    ${balance.available <= 0 ? html`<p class="notice warning">Your balance is empty: requests are refused with 402 until you <a href="/platform/top-up">top up</a>.</p>` : ''}
    <h2>Last 30 days</h2>
    <div class="chart">${usageChart(days, currency)}</div>`;
  sendPage(res, 200, page({ title: 'Overview', email: session.email, csrf: csrfToken(req, res), active: 'overview' }, body));
}

/** The member acting, as the operations take it: their changes are audited under their email. */
const memberOperator = (ctx: PlatformServices, session: Session): Operator => ({ redis: ctx.redis, secret: ctx.keySecret, actor: `member:${session.email}` });

/** The limit fields of a key's form, for creating a key or changing one; `current` fills them in. */
function limitFields(models: string[], currency: string, idPrefix: string, current?: KeyView): Html {
  const allowed = new Set(current?.models ?? []);
  const period = current?.budgetPeriod ?? 'month';
  return html`<fieldset class="limits"><legend>Models (none ticked: every model)</legend>
      ${models.map((m) => html`<label class="check"><input type="checkbox" name="models" value="${m}"${allowed.has(m) ? html` checked` : ''}> ${m}</label>`)}
    </fieldset>
    <div><label for="${idPrefix}budget">Budget (${currency}; empty: none)</label><input id="${idPrefix}budget" name="budget" type="text" inputmode="decimal" value="${current?.budget ?? ''}" placeholder="e.g. 25"></div>
    <div><label for="${idPrefix}period">Per</label><select id="${idPrefix}period" name="budget_period">${BUDGET_PERIODS.map((p) => html`<option value="${p}"${p === period ? html` selected` : ''}>${p}</option>`)}</select></div>
    <div><label for="${idPrefix}expires">Expires (UTC; empty: never)</label><input id="${idPrefix}expires" name="expires" type="date" value="${current?.expiresAt?.slice(0, 10) ?? ''}"></div>
    <div><label for="${idPrefix}tier">Service tier</label><select id="${idPrefix}tier" name="tier">${SERVICE_TIERS.map((t) => html`<option value="${t}"${t === (current?.tier ?? 'default') ? html` selected` : ''}>${t}</option>`)}</select></div>`;
}

/** The limits a key's form asks for, as the operations take them. */
function limitsFromForm(form: URLSearchParams) {
  const models = form.getAll('models').filter(Boolean);
  const budget = (form.get('budget') ?? '').trim();
  const expires = (form.get('expires') ?? '').trim();
  return {
    models: models.length > 0 ? models : null,
    budget: budget === '' ? null : budget,
    ...(budget === '' ? {} : { budgetPeriod: form.get('budget_period') ?? 'month' }),
    expiresAt: expires === '' ? null : /^\d{4}-\d{2}-\d{2}$/.test(expires) ? `${expires}T00:00:00Z` : expires,
    tier: form.get('tier') || null,
  };
}

type KeyView = Awaited<ReturnType<typeof operations.listKeys>>[number];

export async function showApiKeys(
  req: IncomingMessage,
  res: ServerResponse,
  ctx: PlatformServices,
  session: Session,
  created?: { key: string; name: string },
  status = 200,
  error?: string,
  /** The id of a key just revoked, to confirm it. */
  revokedId?: string,
): Promise<void> {
  const csrf = csrfToken(req, res);
  const currency = ctx.routing().billing.currency;
  const models = [...ctx.routing().models.keys()];
  const keys = await operations.listKeys(memberOperator(ctx, session), session.account);
  const revoked = revokedId && keys.find((k) => k.id === revokedId && k.revoked);
  const fresh: Html | '' = created
    ? html`<section class="notice warning" role="status">
        <p><strong>Your new key "${created.name}".</strong> Copy it now: it is shown this once and cannot be shown again.</p>
        <div class="secret"><code id="new-key" data-testid="new-key">${created.key}</code><button type="button" class="secondary" data-copy="new-key">Copy</button></div>
      </section>`
    : '';
  const limitsOf = (k: KeyView) => [k.models ? k.models.join(', ') : 'every model', k.expiresAt ? `until ${k.expiresAt.slice(0, 10)}` : '', k.tier === 'default' ? '' : `${k.tier} tier`].filter(Boolean).join('; ');
  const rows = keys.map(
    (k) => html`<tr data-key="${k.id}">
      <td>${k.name}</td><td><code>${maskedKey(k.suffix)}</code></td><td>${when(Date.parse(k.created))}</td><td>${when(k.lastUsed ? Date.parse(k.lastUsed) : null)}</td>
      <td>${limitsOf(k)}</td>
      <td data-testid="spend">${k.budget ? `${k.spentThisPeriod} of ${k.budget} ${currency} ${{ day: 'today', month: 'this month', total: 'in total' }[k.budgetPeriod!]}` : '-'}</td>
      <td>${k.revoked
        ? html`<span class="tag off">revoked</span>`
        : html`<details class="key-limits"><summary>Limits</summary><form method="post" action="/platform/api-keys/${k.id}/limits" class="filters">
            <input type="hidden" name="_csrf" value="${csrf}">${limitFields(models, currency, `${k.id}-`, k)}<div><button type="submit">Save limits</button></div></form></details>
          <form method="post" action="/platform/api-keys/${k.id}/revoke" class="inline" data-confirm="Revoke the key ${k.name}? Requests with it fail at once.">
          <input type="hidden" name="_csrf" value="${csrf}"><button type="submit" class="danger">Revoke</button></form>`}</td>
    </tr>`,
  );
  const body = html`<h1>API keys</h1>
    ${error ? html`<p class="notice error" role="alert">${error}</p>` : ''}
    ${revoked ? html`<p class="notice success" role="status">The key "${revoked.name}" is revoked: requests with it are refused from now on, on every replica.</p>` : ''}
    ${fresh}
    <form method="post" action="/platform/api-keys" class="filters">
      <input type="hidden" name="_csrf" value="${csrf}">
      <div><label for="name">Name</label><input id="name" name="name" type="text" maxlength="64" required placeholder="e.g. search-backend"></div>
      <div><button type="submit">Create key</button></div>
      <details class="key-limits"><summary>Limits (optional): models, budget, expiry, tier</summary><div class="filters">${limitFields(models, currency, 'new-')}</div></details>
    </form>
    ${keys.length
      ? html`<table><thead><tr><th>Name</th><th>Key</th><th>Created</th><th>Last used</th><th>Limits</th><th>Spent</th><th></th></tr></thead><tbody>${rows}</tbody></table>`
      : html`<p class="muted">No keys yet.</p>`}`;
  sendPage(res, status, page({ title: 'API keys', email: session.email, csrf, active: 'keys' }, body));
}

export async function createKey(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session, form: URLSearchParams): Promise<void> {
  const name = (form.get('name') ?? '').trim();
  if (!name || name.length > 64) return showApiKeys(req, res, ctx, session, undefined, 400, 'Give the key a name of 1 to 64 characters.');
  try {
    const { apiKey } = await operations.createKey(memberOperator(ctx, session), session.account, { name, ...limitsFromForm(form) });
    await showApiKeys(req, res, ctx, session, { key: apiKey, name });
  } catch (err) {
    if (!(err instanceof OperationRefused)) throw err;
    await showApiKeys(req, res, ctx, session, undefined, 400, `The key was not created: ${err.message}.`);
  }
}

/** Changes the limits of one of the account's own keys. */
export async function changeKeyLimits(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session, keyId: string, form: URLSearchParams): Promise<void> {
  try {
    await operations.setKeyLimits(memberOperator(ctx, session), keyId, limitsFromForm(form), session.account);
    redirect(res, '/platform/api-keys');
  } catch (err) {
    if (!(err instanceof OperationRefused)) throw err;
    await showApiKeys(req, res, ctx, session, undefined, 400, `The limits were not changed: ${err.message}.`);
  }
}

export async function revokeKey(res: ServerResponse, ctx: PlatformServices, session: Session, keyId: string): Promise<void> {
  try {
    await operations.revokeKey(memberOperator(ctx, session), keyId, session.account);
  } catch (err) {
    // Another account's key, or none: the page says nothing was revoked by showing no confirmation.
    if (!(err instanceof OperationRefused)) throw err;
  }
  redirect(res, `/platform/api-keys?revoked=${encodeURIComponent(keyId)}`);
}

export async function showTopUp(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session, status = 200, notice?: { kind: 'error' | 'success'; text: string }): Promise<void> {
  const currency = ctx.routing().billing.currency;
  const b = await balanceSummary(ctx.redis, session.account);
  const csrf = csrfToken(req, res);
  const body = html`<h1>Top up</h1>
    ${notice ? html`<p class="notice ${notice.kind}" role="${notice.kind === 'error' ? 'alert' : 'status'}">${notice.text}</p>` : ''}
    <div class="cards">
      <div class="card"><div class="label">Balance</div><div class="value" data-testid="balance">${formatMicros(b.total)} ${currency}</div></div>
      <div class="card"><div class="label">Granted by your operator</div><div class="value">${formatMicros(b.granted)}</div></div>
      <div class="card"><div class="label">Topped up</div><div class="value">${formatMicros(b.toppedUp)}</div></div>
    </div>
    <h2>Redeem a credit code</h2>
    <form method="post" action="/platform/top-up" class="filters">
      <input type="hidden" name="_csrf" value="${csrf}">
      <div><label for="code">Credit code</label><input id="code" class="code" name="code" type="text" required placeholder="PARLEY-XXXX-XXXX-XXXX-XXXX" autocomplete="off"></div>
      <div><button type="submit">Redeem</button></div>
    </form>
    <h2>How credit is added</h2>
    <p>Your operator adds credit in two ways: a grant to your account (<code>parley credit grant</code>), or a credit code
    (<code>parley credit-codes create</code>) that you redeem here, once. Requests hold their most possible cost while they run
    and are charged what they used when they finish; an interrupted reply costs nothing.</p>`;
  sendPage(res, status, page({ title: 'Top up', email: session.email, csrf, active: 'top-up' }, body));
}

export async function redeemCode(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session, form: URLSearchParams): Promise<void> {
  const code = (form.get('code') ?? '').trim();
  if (!/^PARLEY(-[A-Z0-9]{4}){4}$/i.test(code)) return showTopUp(req, res, ctx, session, 400, { kind: 'error', text: 'That is not a credit code; codes look like PARLEY-XXXX-XXXX-XXXX-XXXX.' });
  const result = await redeemCreditCode(ctx.redis, session.account, code);
  if (result.kind === 'credited') {
    return showTopUp(req, res, ctx, session, 200, { kind: 'success', text: `Credited ${formatMicros(result.amount)} ${ctx.routing().billing.currency}.` });
  }
  const text = {
    already_redeemed: 'This code has already been redeemed.',
    balance_full: 'Your balance is at the most an account may hold; redeem this code once you have spent some of it.',
    unknown: 'This code is not valid. Check it and try again.',
  }[result.kind];
  await showTopUp(req, res, ctx, session, 400, { kind: 'error', text });
}
