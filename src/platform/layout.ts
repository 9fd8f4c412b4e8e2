// The frame every platform page shares: head, navigation, the stylesheet
// and the few lines of script (copy buttons, confirmations), all served by
// Parley itself: nothing comes from a CDN.
import type { ServerResponse } from 'node:http';
import { html, type Html } from './html.js';

export interface PageFrame {
  title: string;
  /** The signed-in member, for the navigation; absent on the sign-in pages. */
  email?: string;
  csrf: string;
  active?: string;
}

const NAV = [
  ['overview', '/platform', 'Overview'],
  ['keys', '/platform/api-keys', 'API keys'],
  ['usage', '/platform/usage', 'Usage'],
  ['batches', '/platform/batches', 'Batches'],
  ['models', '/platform/models', 'Models'],
  ['top-up', '/platform/top-up', 'Top up'],
] as const;

export function page(frame: PageFrame, body: Html): Html {
  const nav = frame.email
    ? html`<nav aria-label="Platform">
        <a class="brand" href="/platform">Parley</a>
        <ul>${NAV.map(([id, href, label]) => html`<li><a href="${href}"${frame.active === id ? html` aria-current="page"` : ''}>${label}</a></li>`)}</ul>
        <form method="post" action="/platform/logout" class="logout">
          <input type="hidden" name="_csrf" value="${frame.csrf}"><span class="who">${frame.email}</span>
          <button type="submit" class="link">Log out</button>
        </form>
      </nav>`
    : html`<nav aria-label="Platform"><a class="brand" href="/platform">Parley</a></nav>`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${frame.title} · Parley</title><link rel="icon" href="/platform/static/favicon.svg" type="image/svg+xml"><link rel="stylesheet" href="/platform/static/style.css"></head>
<body>${nav}<main id="main">${body}</main><script src="/platform/static/platform.js" defer></script></body></html>`;
}

export function sendPage(res: ServerResponse, status: number, doc: Html): void {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
    'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'",
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'same-origin',
  });
  res.end(doc.text);
}

export function redirect(res: ServerResponse, location: string): void {
  res.writeHead(303, { location, 'cache-control': 'no-store' });
  res.end();
}

/** A speech bubble in the accent colour: the tab's icon. */
export const FAVICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><path d="M6 4h20a4 4 0 0 1 4 4v12a4 4 0 0 1-4 4H14l-7 6v-6H6a4 4 0 0 1-4-4V8a4 4 0 0 1 4-4z" fill="#2f5bea"/><path d="M9 11h14M9 16h9" stroke="#fff" stroke-width="2.5" stroke-linecap="round"/></svg>`;

export const STYLE_CSS = `
:root{--bg:#f7f7f8;--card:#fff;--ink:#1b1d21;--muted:#5f6672;--line:#e2e4e8;--accent:#2f5bea;--warn:#9a3412;--ok:#166534;
font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);background:var(--bg)}
*{box-sizing:border-box}body{margin:0}
nav{display:flex;flex-wrap:wrap;align-items:center;gap:1rem;padding:.75rem 1.5rem;background:var(--card);border-bottom:1px solid var(--line)}
nav ul{display:flex;flex-wrap:wrap;gap:.25rem;list-style:none;margin:0;padding:0;flex:1}
nav a{color:var(--ink);text-decoration:none;padding:.4rem .7rem;border-radius:6px}
nav a[aria-current=page],nav a:hover{background:#eef2ff;color:var(--accent)}
.brand{font-weight:700;font-size:1.1rem}.who{color:var(--muted);margin-right:.5rem;font-size:.9rem}
main{max-width:1080px;margin:0 auto;padding:1.5rem}
h1{font-size:1.6rem;margin:.2rem 0 1rem}h2{font-size:1.15rem;margin:1.5rem 0 .6rem}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(210px,1fr));gap:1rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:1rem 1.2rem}
.card .label{color:var(--muted);font-size:.85rem}.card .value{font-size:1.7rem;font-weight:650;margin-top:.25rem}
table{width:100%;border-collapse:collapse;background:var(--card);border:1px solid var(--line);border-radius:10px;overflow:hidden}
th,td{text-align:left;padding:.55rem .75rem;border-bottom:1px solid var(--line);font-size:.92rem}th{background:#fafafb;color:var(--muted);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
form.inline{display:inline}label{display:block;font-weight:600;margin:.6rem 0 .25rem}
td a,p a,.muted a{color:var(--accent);text-decoration:none;font-weight:550}td a:hover,p a:hover{text-decoration:underline}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em}p code,li code{background:#eef0f3;padding:.1rem .3rem;border-radius:4px}
input[type=text],input[type=email],input[type=password],input[type=date],select{width:100%;max-width:26rem;padding:.55rem .65rem;border:1px solid #c9cdd4;border-radius:6px;font:inherit}
input.code{min-width:30ch}
button,.button{display:inline-block;padding:.55rem 1rem;border:0;border-radius:6px;background:var(--accent);color:#fff;font:inherit;cursor:pointer;text-decoration:none}
button.secondary{background:#e9ecf2;color:var(--ink)}button.danger{background:#b42318}button.link{background:none;color:var(--accent);padding:0}
.notice{padding:.75rem 1rem;border-radius:8px;margin:0 0 1rem;border:1px solid}
.cards+.notice{margin-top:1rem}
.error{background:#fef2f2;border-color:#fecaca;color:#991b1b}.success{background:#f0fdf4;border-color:#bbf7d0;color:var(--ok)}
.warning{background:#fff7ed;border-color:#fed7aa;color:var(--warn)}
.secret{display:flex;gap:.5rem;align-items:center;flex-wrap:wrap}.secret code{font-size:1rem;padding:.5rem .7rem;background:#111827;color:#f9fafb;border-radius:6px;word-break:break-all}
pre{background:#111827;color:#f3f4f6;padding:1rem;border-radius:8px;overflow-x:auto;font-size:.85rem}
.muted{color:var(--muted)}.filters{display:flex;flex-wrap:wrap;gap:1rem;align-items:flex-end;margin-bottom:1rem}.filters label{margin:0 0 .25rem}
.filters input,.filters select,.filters button{height:2.5rem}.filters button{white-space:nowrap}
.filters details.key-limits{flex-basis:100%}details.key-limits summary{cursor:pointer;color:var(--muted);margin-bottom:.5rem}
fieldset.limits{border:1px solid var(--line);border-radius:6px;padding:.25rem .75rem .5rem;margin:0}fieldset.limits legend{font-size:.875rem;color:var(--muted)}
.filters .check{display:inline-flex;align-items:center;gap:.25rem;margin-right:1rem}.filters .check input{height:auto}
.chart{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:1rem}.chart svg{width:100%;height:auto}
.legend{display:flex;gap:1rem;flex-wrap:wrap;font-size:.85rem;color:var(--muted);margin-top:.5rem}.legend i{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin-right:.3rem;vertical-align:-1px}
.legend .hit{background:#2f5bea}.legend .miss{background:#93a8f4}.legend .output{background:#f59e0b}.legend .cost{background:#b45309;height:3px;vertical-align:3px}
.auth{max-width:26rem;margin:3rem auto}.tag{display:inline-block;padding:.1rem .5rem;border-radius:99px;background:#eef2ff;color:var(--accent);font-size:.8rem;margin-right:.3rem}
.tag.off{background:#f1f2f4;color:var(--muted)}
.bar{display:block;width:100%;min-width:8rem;height:.6rem;background:#eef0f3;border-radius:99px;margin-bottom:.2rem}.bar .done{fill:var(--ok)}.bar .failed{fill:#b42318}
@media (max-width:640px){main{padding:1rem}th,td{padding:.45rem}.card .value{font-size:1.35rem}}
`;

// Copy buttons and confirmations; progressive: every form works without it.
export const PLATFORM_JS = `
document.addEventListener('click', async (e) => {
  const copy = e.target.closest('[data-copy]');
  if (copy) {
    await navigator.clipboard.writeText(document.getElementById(copy.dataset.copy).textContent.trim());
    copy.textContent = 'Copied';
  }
});
document.addEventListener('submit', (e) => {
  const question = e.target.dataset.confirm;
  if (question && !confirm(question)) e.preventDefault();
});
`;
