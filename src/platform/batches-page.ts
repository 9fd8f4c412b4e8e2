// The Batches page: each of the account's batches (OpenAI's and Anthropic's),
// its status, a bar of its lines done and failed out of all (an SVG: the
// page's policy allows no inline style), its cost so far,
// and its results to download, through the member's session.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { resultLines, type ResultPart } from '../batches/batch-results.js';
import { hasEnded, listBatches, readBatch, type BatchRecord } from '../batches/batch-store.js';
import { formatMicros } from '../billing/prices.js';
import { ApiError } from '../protocol/errors.js';
import { sendDownload } from '../protocol/http-io.js';
import type { PlatformServices } from './services.js';
import { html } from './html.js';
import { page, sendPage } from './layout.js';
import { csrfToken, type Session } from './sessions.js';

/** Batches shown: the newest of each API. */
const SHOWN = 50;

const percent = (part: number, whole: number) => (whole === 0 ? 0 : Math.round((part / whole) * 1000) / 10);
const when = (ms: number | null) => (ms === null ? '' : new Date(ms).toISOString().replace('T', ' ').slice(0, 16) + ' UTC');

function downloads(b: BatchRecord) {
  if (!hasEnded(b.status)) return html`<span class="muted">when it ends</span>`;
  const link = (part: string, label: string) => html`<a href="/platform/batches/${b.id}/${part}" download>${label}</a>`;
  if (b.api === 'anthropic') return link('results', 'Results');
  return html`${b.outputFileId ? link('output', 'Output') : ''} ${b.errorFileId ? link('error', 'Errors') : ''}`;
}

function row(b: BatchRecord, currency: string) {
  const { total, succeeded, errored } = b.counts;
  return html`<tr data-batch="${b.id}"><td><code>${b.id}</code><div class="muted">${b.api === 'anthropic' ? 'Message Batches' : b.endpoint} · ${b.model}</div></td>
    <td>${b.status}</td>
    <td><svg class="bar" viewBox="0 0 100 6" preserveAspectRatio="none" role="img" aria-label="${succeeded} done, ${errored} failed of ${total}">
        <rect class="done" x="0" y="0" width="${percent(succeeded, total)}" height="6"/><rect class="failed" x="${percent(succeeded, total)}" y="0" width="${percent(errored, total)}" height="6"/></svg>
      <span class="muted">${succeeded} done · ${errored} failed · ${total} in all</span></td>
    <td class="num">${formatMicros(b.cost, 6)} ${currency}</td><td>${when(b.times.created)}</td><td>${downloads(b)}</td></tr>`;
}

export async function showBatches(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session): Promise<void> {
  const [openai, anthropic] = await Promise.all((['openai', 'anthropic'] as const).map((api) => listBatches(ctx.redis, session.account, api, { limit: SHOWN })));
  const batches = [...openai.batches, ...anthropic.batches].sort((a, b) => b.times.created! - a.times.created!);
  const currency = ctx.routing().billing.currency;
  const body = html`<h1>Batches</h1>
    <p class="muted">Batch jobs sent with OpenAI's Batch API (<code>/v1/batches</code>) or Anthropic's Message Batches (<code>/v1/messages/batches</code>) run at the flex tier, in capacity interactive requests leave free, at flex prices.</p>
    ${batches.length
      ? html`<table data-testid="batches-table"><thead><tr><th>Batch</th><th>Status</th><th>Progress</th><th class="num">Cost so far</th><th>Created</th><th>Results</th></tr></thead>
          <tbody>${batches.map((b) => row(b, currency))}</tbody></table>`
      : html`<p class="muted">No batches yet.</p>`}`;
  sendPage(res, 200, page({ title: 'Batches', email: session.email, csrf: csrfToken(req, res), active: 'batches' }, body));
}

/** An ended batch's output, error or results file, as a download. */
export async function downloadBatchResults(res: ServerResponse, ctx: PlatformServices, session: Session, id: string, part: ResultPart): Promise<void> {
  const batch = await readBatch(ctx.redis, session.account, id);
  if (!batch || !hasEnded(batch.status)) throw new ApiError(404, 'not_found_error', `No ended batch with id '${id}'.`, 'not_found');
  const headers = { 'content-type': 'application/jsonl', 'content-disposition': `attachment; filename="${id}_${part === 'all' ? 'results' : part}.jsonl"`, 'cache-control': 'no-store' };
  await sendDownload(res, headers, resultLines(ctx.redis, batch, part), ctx.routing().settings.clientSendTimeoutMs, { allowance: ctx.bodies.allowance(session.account, res) });
}
