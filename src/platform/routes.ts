// The platform's routes under /platform, served by Parley itself on the
// API's origin. Pages that need a member redirect to the log-in page; every
// POST must carry the visitor's CSRF token.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { PlatformServices } from './services.js';
import { ApiError, routeNotFound } from '../protocol/errors.js';
import { changeKeyLimits, createKey, redeemCode, revokeKey, showApiKeys, showOverview, showTopUp } from './account-pages.js';
import { logIn, logOut, showAuth, signUp } from './auth-pages.js';
import { decodePathSegment } from '../protocol/http-io.js';
import { html } from './html.js';
import { FAVICON_SVG, page, PLATFORM_JS, redirect, sendPage, STYLE_CSS } from './layout.js';
import { downloadBatchResults, showBatches } from './batches-page.js';
import { showModel, showModels } from './model-pages.js';
import { csrfToken, csrfValid, currentSession } from './sessions.js';
import { downloadUsageCsv, showUsage } from './usage-page.js';

const FORM_LIMIT_BYTES = 16 * 1024;

async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const type = req.headers['content-type'] ?? '';
  if (!type.startsWith('application/x-www-form-urlencoded')) throw new ApiError(415, 'invalid_request_error', 'Forms are sent as application/x-www-form-urlencoded.', 'invalid_content_type');
  let text = '';
  for await (const chunk of req as AsyncIterable<Buffer>) {
    text += chunk.toString('utf8');
    if (text.length > FORM_LIMIT_BYTES) throw new ApiError(413, 'invalid_request_error', 'The form is too large.', 'request_too_large');
  }
  return new URLSearchParams(text);
}

function sendStatic(res: ServerResponse, type: string, body: string): void {
  res.writeHead(200, { 'content-type': `${type}; charset=utf-8`, 'cache-control': 'public, max-age=3600', 'x-content-type-options': 'nosniff' });
  res.end(body);
}

function forbidden(req: IncomingMessage, res: ServerResponse): void {
  const body = html`<section class="auth card"><h1>This form has expired</h1><p class="notice error" role="alert">The request was refused because its security token is missing or wrong. Go back, reload the page and try again.</p></section>`;
  sendPage(res, 403, page({ title: 'Refused', csrf: csrfToken(req, res) }, body));
}

/**
 * A failure as a page, for a person in a browser rather than a client
 * library: the request's own error (a page not found, a form too large) with
 * its status, and anything else (a Redis away, stalled or full first of all)
 * as a 503 that says to try again.
 */
function failurePage(req: IncomingMessage, res: ServerResponse, err: unknown): void {
  if (res.headersSent) return void res.destroy();
  if (!(err instanceof ApiError) || err.status >= 500) {
    console.error('parley: platform:', err);
    const body = html`<section class="auth card"><h1>Temporarily unavailable</h1><p class="notice error" role="alert">Parley's account store cannot take this request right now. Try again in a moment.</p></section>`;
    res.setHeader('retry-after', '1');
    return sendPage(res, 503, page({ title: 'Unavailable', csrf: '' }, body));
  }
  const title = err.status === 404 ? 'Page not found' : 'Request refused';
  sendPage(res, err.status, page({ title, csrf: csrfToken(req, res) }, html`<section class="auth card"><h1>${title}</h1><p class="notice error" role="alert">${err.message}</p><p><a href="/platform">Back to the platform</a></p></section>`));
}

/** Serves `path` if it is a platform route, a failure included (as a page); returns false otherwise. */
export async function handlePlatform(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, path: string, query: URLSearchParams): Promise<boolean> {
  if (path === '/') return redirect(res, '/platform'), true;
  // Browsers ask for it on every origin, whatever the page's own icon link says.
  if (path === '/favicon.ico') return sendStatic(res, 'image/svg+xml', FAVICON_SVG), true;
  if (path !== '/platform' && !path.startsWith('/platform/')) return false;
  try {
    await servePlatform(req, res, ctx, path, query);
  } catch (err) {
    failurePage(req, res, err);
  }
  return true;
}

async function servePlatform(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, path: string, query: URLSearchParams): Promise<void> {
  const method = req.method ?? 'GET';
  if (method === 'GET' && path === '/platform/static/style.css') return sendStatic(res, 'text/css', STYLE_CSS);
  if (method === 'GET' && path === '/platform/static/platform.js') return sendStatic(res, 'text/javascript', PLATFORM_JS);
  if (method === 'GET' && path === '/platform/static/favicon.svg') return sendStatic(res, 'image/svg+xml', FAVICON_SVG);

  let form: URLSearchParams | undefined;
  if (method === 'POST') {
    form = await readForm(req);
    if (!csrfValid(req, form.get('_csrf') ?? undefined)) return forbidden(req, res);
  }
  if (path === '/platform/login') {
    if (form) await logIn(req, res, ctx, form);
    else showAuth(req, res, ctx, 'login', 200, undefined, undefined, query.has('signed-out') ? { kind: 'success', text: 'You are logged out.' } : undefined);
    return;
  }
  if (path === '/platform/signup') {
    if (form) await signUp(req, res, ctx, form);
    else showAuth(req, res, ctx, 'signup');
    return;
  }

  const session = await currentSession(ctx.redis, req);
  if (!session) return redirect(res, '/platform/login');
  const keyRevoke = /^\/platform\/api-keys\/(key_[0-9a-f]+)\/revoke$/.exec(path);
  const keyLimits = /^\/platform\/api-keys\/(key_[0-9a-f]+)\/limits$/.exec(path);
  const batchDownload = /^\/platform\/batches\/((?:msg)?batch_[\w-]+)\/(output|error|results)$/.exec(path);
  if (form && path === '/platform/logout') await logOut(req, res, ctx, session);
  else if (form && path === '/platform/api-keys') await createKey(req, res, ctx, session, form);
  else if (form && keyRevoke) await revokeKey(res, ctx, session, keyRevoke[1]);
  else if (form && keyLimits) await changeKeyLimits(req, res, ctx, session, keyLimits[1], form);
  else if (form && path === '/platform/top-up') await redeemCode(req, res, ctx, session, form);
  else if (form) throw routeNotFound(method, path);
  else if (path === '/platform') await showOverview(req, res, ctx, session);
  else if (path === '/platform/api-keys') await showApiKeys(req, res, ctx, session, undefined, 200, undefined, query.get('revoked') ?? undefined);
  else if (path === '/platform/usage') await showUsage(req, res, ctx, session, query);
  else if (path === '/platform/usage.csv') await downloadUsageCsv(res, ctx, session, query);
  else if (path === '/platform/models') showModels(req, res, ctx, session);
  else if (path === '/platform/batches') await showBatches(req, res, ctx, session);
  else if (batchDownload) await downloadBatchResults(res, ctx, session, batchDownload[1], batchDownload[2] === 'results' ? 'all' : (batchDownload[2] as 'output' | 'error'));
  else if (path === '/platform/top-up') await showTopUp(req, res, ctx, session);
  else if (!(path.startsWith('/platform/models/') && showModel(req, res, ctx, session, decodePathSegment(path.slice('/platform/models/'.length))))) {
    throw routeNotFound(method, path);
  }
}
