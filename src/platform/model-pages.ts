// The models list and a page per model from the routing file: context
// window, prices, what it is set up for, the operator's set-up text, and
// copy-ready examples with this server's own base URL.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { PlatformServices } from './services.js';
import type { ApiName } from '../config.js';
import type { RoutedModel } from '../routing/routing-table.js';
import { html, type Html } from './html.js';
import { page, sendPage } from './layout.js';
import { csrfToken, type Session } from './sessions.js';

function baseUrl(req: IncomingMessage): string {
  const proto = req.headers['x-forwarded-proto'] === 'https' || (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
  const host = /^[\w.:[\]-]+$/.test(req.headers.host ?? '') ? req.headers.host : 'localhost';
  return `${proto}://${host}/v1`;
}

const price = (perMillion: number) => `${perMillion}`;

/**
 * About the smallest window Claude Code works in. It keeps part of the window for its reply and for compacting, and
 * its first request is about 11,000 tokens: told a 24,576-token window, 2.1.332 refused its own first request; told
 * 49,152, it ran and compacted as it should.
 */
const CLAUDE_CODE_SMALLEST_WINDOW = 48_000;

/** What a client may send this model, in a sentence. */
function supportSentence(supports: { tools: boolean; jsonOutput: boolean }): string {
  const features = [supports.tools && 'tool calls (`tools`, `tool_choice`)', supports.jsonOutput && 'JSON output (`response_format`)'].filter(Boolean);
  if (features.length === 0) return 'Text in, text out. Tool definitions and `response_format` are not passed to this model.';
  const missing = !supports.tools ? ' Tool definitions are not passed to it.' : !supports.jsonOutput ? ' `response_format` is not passed to it.' : '';
  return `Text in, text out, with ${features.join(' and ')}.${missing}`;
}

/**
 * The operator's set-up text as paragraphs, with its `code` spans (Markdown's
 * backticks) set as code: the only Markdown operators' notes use.
 */
function withCodeSpans(text: string): Html {
  const paragraphs = text.trim().split(/\n\s*\n/);
  return html`${paragraphs.map((p) => html`<p>${p.split(/(`[^`\n]+`)/).map((part) => (part.startsWith('`') && part.endsWith('`') && part.length > 2 ? html`<code>${part.slice(1, -1)}</code>` : part))}</p>`)}`;
}

export function showModels(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session): void {
  const table = ctx.routing();
  const currency = table.billing.currency;
  const body = html`<h1>Models</h1>
    <table><thead><tr><th>Model</th><th class="num">Context window</th><th class="num">Input, cache hit</th><th class="num">Input, cache miss</th><th class="num">Output</th></tr></thead><tbody>
    ${[...table.models.values()].map((m) => html`<tr><td><a href="/platform/models/${encodeURIComponent(m.config.id)}">${m.config.id}</a><br><span class="muted">${m.config.description}</span></td>
      <td class="num">${m.config.contextWindow.toLocaleString('en-US')}</td><td class="num">${price(m.config.pricesPerMillion.inputCacheHit)}</td>
      <td class="num">${price(m.config.pricesPerMillion.inputCacheMiss)}</td><td class="num">${price(m.config.pricesPerMillion.output)}</td></tr>`)}
    </tbody></table><p class="muted">Prices in ${currency} per million tokens.</p>`;
  sendPage(res, 200, page({ title: 'Models', email: session.email, csrf: csrfToken(req, res), active: 'models' }, body));
}

type Language = 'curl' | 'python' | 'node';

/** Copy-ready calls of each API the model serves, with this server's base URL. */
function examples(model: RoutedModel, base: string): { api: ApiName; title: string; code: Record<Language, string> }[] {
  const id = model.config.id;
  const all: Record<ApiName, { title: string; code: Record<Language, string> }> = {
    chat: {
      title: 'Chat completions',
      code: {
        curl: `curl ${base}/chat/completions \\\n  -H "Authorization: Bearer $PARLEY_API_KEY" \\\n  -H "Content-Type: application/json" \\\n  -d '{"model": "${id}", "messages": [{"role": "user", "content": "Hello"}]}'`,
        python: `import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url="${base}", api_key=os.environ["PARLEY_API_KEY"])\nreply = client.chat.completions.create(\n    model="${id}",\n    messages=[{"role": "user", "content": "Hello"}],\n)\nprint(reply.choices[0].message.content)`,
        node: `import OpenAI from 'openai';\n\nconst client = new OpenAI({ baseURL: '${base}', apiKey: process.env.PARLEY_API_KEY });\nconst reply = await client.chat.completions.create({\n  model: '${id}',\n  messages: [{ role: 'user', content: 'Hello' }],\n});\nconsole.log(reply.choices[0].message.content);`,
      },
    },
    embeddings: {
      title: 'Embeddings',
      code: {
        curl: `curl ${base}/embeddings \\\n  -H "Authorization: Bearer $PARLEY_API_KEY" \\\n  -H "Content-Type: application/json" \\\n  -d '{"model": "${id}", "input": ["first text", "second text"]}'`,
        python: `import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url="${base}", api_key=os.environ["PARLEY_API_KEY"])\nreply = client.embeddings.create(model="${id}", input=["first text", "second text"])\nprint(len(reply.data[0].embedding))`,
        node: `import OpenAI from 'openai';\n\nconst client = new OpenAI({ baseURL: '${base}', apiKey: process.env.PARLEY_API_KEY });\nconst reply = await client.embeddings.create({ model: '${id}', input: ['first text', 'second text'] });\nconsole.log(reply.data[0].embedding.length);`,
      },
    },
    completions: {
      title: 'Text completions',
      code: {
        curl: `curl ${base}/completions \\\n  -H "Authorization: Bearer $PARLEY_API_KEY" \\\n  -H "Content-Type: application/json" \\\n  -d '{"model": "${id}", "prompt": "def fibonacci(n):", "max_tokens": 64}'`,
        python: `import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url="${base}", api_key=os.environ["PARLEY_API_KEY"])\nreply = client.completions.create(model="${id}", prompt="def fibonacci(n):", max_tokens=64)\nprint(reply.choices[0].text)`,
        node: `import OpenAI from 'openai';\n\nconst client = new OpenAI({ baseURL: '${base}', apiKey: process.env.PARLEY_API_KEY });\nconst reply = await client.completions.create({ model: '${id}', prompt: 'def fibonacci(n):', max_tokens: 64 });\nconsole.log(reply.choices[0].text);`,
      },
    },
  };
  return model.config.api.map((api) => ({ api, ...all[api] }));
}

export function showModel(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session, id: string): boolean {
  const model = ctx.routing().models.get(id);
  if (!model) return false;
  const c = model.config;
  const base = baseUrl(req);
  const ex = examples(model, base);
  // Anthropic's clients add /v1 themselves.
  const origin = base.replace(/\/v1$/, '');
  const currency = ctx.routing().billing.currency;
  const body = html`<p><a href="/platform/models">← Models</a></p><h1>${c.id}</h1>
    ${c.description ? html`<p>${c.description}</p>` : ''}
    ${c.aliases.length ? html`<p data-testid="aliases">Also answers to ${c.aliases.map((a, i) => html`${i ? ', ' : ''}<code>${a}</code>`)}.</p>` : ''}
    <div class="cards">
      <div class="card"><div class="label">Context window</div><div class="value" data-testid="context-window">${c.contextWindow.toLocaleString('en-US')} tokens</div></div>
      <div class="card"><div class="label">Input, cache hit</div><div class="value">${price(c.pricesPerMillion.inputCacheHit)}</div><div class="muted">${currency} per million tokens</div></div>
      <div class="card"><div class="label">Input, cache miss</div><div class="value">${price(c.pricesPerMillion.inputCacheMiss)}</div><div class="muted">${currency} per million tokens</div></div>
      <div class="card"><div class="label">Output</div><div class="value">${price(c.pricesPerMillion.output)}</div><div class="muted">${currency} per million tokens</div></div>
    </div>
    <h2>What it supports</h2>
    <div data-testid="supports">${withCodeSpans(supportSentence(c.supports))}</div>
    ${c.setup ? html`<h2>How it is served</h2><div class="setup">${withCodeSpans(c.setup)}</div>` : ''}
    <h2>Try it</h2>
    <p data-testid="apis">Serves ${ex.map((e) => e.title.toLowerCase()).join(' and ')}.</p>
    ${ex.map((e, i) => html`${ex.length > 1 ? html`<h3>${e.title}</h3>` : ''}
      ${(['curl', 'python', 'node'] as const).map((lang) => {
        const target = i === 0 ? `example-${lang}` : `example-${e.api}-${lang}`;
        return html`<h4>${lang === 'curl' ? 'curl' : lang === 'python' ? 'Python' : 'Node'}</h4>
      <pre id="${target}">${e.code[lang]}</pre><button type="button" class="secondary" data-copy="${target}">Copy</button>`;
      })}`)}
    ${c.api.includes('chat') ? html`<h2>Coding agents</h2>
      <p>Claude Code (Anthropic's Messages API) cannot ask a gateway for a model's window: tell it this one, so that it compacts in time.</p>
      <pre id="agent-claude">ANTHROPIC_BASE_URL=${origin} ANTHROPIC_API_KEY=$PARLEY_API_KEY \\
  CLAUDE_CODE_MAX_CONTEXT_TOKENS=${c.contextWindow} claude --model ${c.id}</pre>
      ${c.contextWindow < CLAUDE_CODE_SMALLEST_WINDOW ? html`<p data-testid="claude-window-note">Claude Code keeps part of the window for its reply and for compacting, and its first request is about 11,000 tokens: it needs a window of about ${CLAUDE_CODE_SMALLEST_WINDOW.toLocaleString('en-US')} tokens or more.</p>` : ''}
      <p>Codex (OpenAI's Responses API), in <code>~/.codex/config.toml</code>, with the window it cannot learn when its key is in an environment variable:</p>
      <pre id="agent-codex">model = "${c.id}"
model_provider = "parley"
model_context_window = ${c.contextWindow}

[model_providers.parley]
name = "Parley"
base_url = "${base}"
env_key = "PARLEY_API_KEY"
wire_api = "responses"</pre>
      ${c.agentInstructions ? html`<p>Or let Codex ask Parley for the window: give the provider a command that prints the key in place of <code>env_key</code>. Codex then also sends this model's own agent instructions in place of its own.</p>
      <pre id="agent-codex-asking">[model_providers.parley.auth]
command = "printenv"
args = ["PARLEY_API_KEY"]</pre>` : ''}` : ''}`;
  sendPage(res, 200, page({ title: c.id, email: session.email, csrf: csrfToken(req, res), active: 'models' }, body));
  return true;
}
