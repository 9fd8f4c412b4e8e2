// The platform in a real browser: playwright-core driving Debian's Chromium
// against a running Parley with a real Redis and a scripted upstream that
// reports cached tokens. Screenshots of every page go to test-artifacts/.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findAccountByEmail } from '../../src/accounts/accounts.js';
import { createCreditCode } from '../../src/billing/credit-codes.js';
import { redisKeys } from '../../src/redis/keys.js';
import { completionBody, replyJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { modelEntry, startTestGateway, type TestGateway } from '../support/gateway.js';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/platform', import.meta.url));

let upstream: FakeUpstream;
let gw: TestGateway;
let browser: Browser;

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  upstream = await startFakeUpstream((_req, res) => {
    replyJson(res, completionBody('Hello from the model', { prompt_tokens: 1200, completion_tokens: 300, prompt_tokens_details: { cached_tokens: 1024 } }));
  });
  gw = await startTestGateway({
    models: [
      modelEntry('team-model', [{ kind: 'vllm', url: upstream.url }], {
        contextWindow: 32768,
        pricesPerMillion: { inputCacheMiss: 0.5, inputCacheHit: 0.05, output: 1.5 },
        supports: { tools: true, jsonOutput: false },
        description: 'The team model.',
        setup: 'vLLM with `--enable-prefix-caching`, 2 replicas.',
        aliases: ['gpt-4o', 'claude-*-haiku-*'],
        agentInstructions: 'You are the team coding agent.',
      }),
    ],
  });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-background-networking'] });
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await upstream?.close();
});

const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

async function signUp(page: Page, email: string, password = 'correct horse battery') {
  await page.goto(`${gw.url}/platform/signup`);
  await page.fill('#email', email);
  await page.fill('#password', password);
  await page.click('button[type=submit]');
}

describe('the platform in a browser', () => {
  it('one journey: sign up, redeem credit, create a key, call the API, find it in usage, revoke the key', async () => {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    await signUp(page, 'journey@team.example');
    await expect.poll(() => page.url()).toBe(`${gw.url}/platform`);
    expect(await page.textContent('[data-testid=available-balance]')).toContain('0.00 USD');
    await shot(page, '01-overview-empty');

    const code = await createCreditCode(gw.redis.client, 5_000_000);
    await page.click('text=Top up');
    await page.fill('#code', code);
    await page.click('button:has-text("Redeem")');
    expect(await page.textContent('.notice.success')).toContain('Credited 5.00 USD');
    expect(await page.textContent('[data-testid=balance]')).toContain('5.00 USD');
    await shot(page, '02-top-up');
    await page.fill('#code', code);
    await page.click('button:has-text("Redeem")');
    expect(await page.textContent('.notice.error')).toContain('already been redeemed');

    await page.click('nav >> text=API keys');
    await page.fill('#name', 'search-backend');
    await page.click('button:has-text("Create key")');
    const key = (await page.textContent('[data-testid=new-key]'))!.trim();
    expect(key).toMatch(/^sk-parley-/);
    expect(await page.textContent('main')).toContain('shown this once');
    await shot(page, '03-api-key-created');
    await page.reload();
    expect(await page.textContent('main')).not.toContain(key);
    expect(await page.textContent('main')).toContain(`sk-parley-...${key.slice(-4)}`);

    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    const reply = await client.chat.completions.create({ model: 'team-model', messages: [{ role: 'user', content: 'hi' }] });
    expect(reply.usage?.prompt_tokens_details?.cached_tokens).toBe(1024);

    // 176 uncached × 0.5 + 1024 cached × 0.05 + 300 output × 1.5 = 589.2 micro-units, charged 590.
    await expect.poll(async () => {
      await page.goto(`${gw.url}/platform/usage`);
      return page.textContent('main');
    }).toContain('team-model');
    const row = await page.textContent('[data-testid=usage-table] tbody tr');
    expect(row).toContain('1200');
    expect(row).toContain('1024');
    expect(row).toContain('300');
    expect(row).toContain('0.00059');
    expect(row).toContain('Chat');
    expect(row).toContain('default');
    await shot(page, '04-usage');
    const csv = await (await page.request.get(`${gw.url}/platform/usage.csv`)).text();
    expect(csv.split('\n')[1]).toContain(',team-model,');

    await page.goto(`${gw.url}/platform`);
    expect(await page.textContent('[data-testid=available-balance]')).toContain('4.99941');
    expect(await page.textContent('[data-testid=month-spend]')).toContain('0.00059');
    expect(await page.locator('.chart svg rect').count()).toBeGreaterThan(0);
    await shot(page, '05-overview');

    await page.goto(`${gw.url}/platform/models`);
    await shot(page, '06-models');
    await page.click('text=team-model');
    expect(await page.textContent('[data-testid=context-window]')).toContain('32,768');
    expect(await page.textContent('#example-python')).toContain(`base_url="${gw.url}/v1"`);
    expect(await page.textContent('main')).toContain('vLLM with --enable-prefix-caching');
    expect(await page.textContent('.setup code')).toBe('--enable-prefix-caching');
    expect(await page.textContent('[data-testid=supports]')).toBe('Text in, text out, with tool calls (tools, tool_choice). response_format is not passed to it.');
    expect(await page.textContent('[data-testid=aliases]')).toBe('Also answers to gpt-4o, claude-*-haiku-*.');
    expect(await page.textContent('#agent-claude')).toContain(`ANTHROPIC_BASE_URL=${gw.url} `);
    expect(await page.textContent('#agent-claude')).toContain('CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768');
    // Claude Code reads an auto-compact window under 100,000 as 100,000: the page does not offer one.
    expect(await page.textContent('#agent-claude')).not.toContain('AUTO_COMPACT');
    expect(await page.textContent('[data-testid=claude-window-note]')).toContain('48,000 tokens or more');
    expect(await page.textContent('#agent-codex')).toContain(`base_url = "${gw.url}/v1"`);
    expect(await page.textContent('#agent-codex')).toContain('model_context_window = 32768');
    // The model has agent instructions, so Codex may ask Parley instead.
    expect(await page.textContent('#agent-codex-asking')).toContain('command = "printenv"');
    await shot(page, '07-model-page');

    await page.goto(`${gw.url}/platform/api-keys`);
    page.once('dialog', (d) => d.accept());
    await page.click('button:has-text("Revoke")');
    await expect.poll(() => page.textContent('main')).toContain('revoked');
    expect(await page.textContent('.notice.success')).toMatch(/The key ".+" is revoked/);
    await shot(page, '08-api-key-revoked');
    const [[, lastAudit]] = await gw.redis.client.xrevrange(redisKeys.audit, '+', '-', 'COUNT', 1);
    expect(lastAudit.slice(0, 4)).toEqual(['actor', 'member:journey@team.example', 'action', 'key.revoke']);
    await expect(client.chat.completions.create({ model: 'team-model', messages: [{ role: 'user', content: 'hi' }] })).rejects.toMatchObject({ status: 401 });
    await context.close();
  });

  it('shows each batch on the Batches page: status, a bar of lines done and failed, cost so far, and its files to download', async () => {
    const page = await browser.newPage();
    await signUp(page, 'batches@team.example');
    await page.click('nav >> text=API keys');
    await page.fill('#name', 'nightly');
    await page.click('button:has-text("Create key")');
    const key = (await page.textContent('[data-testid=new-key]'))!.trim();
    await gw.redis.client.hset(redisKeys.account((await findAccountByEmail(gw.redis.client, 'batches@team.example'))!.id), 'granted', 5_000_000);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    const line = (i: number, messages: unknown) => JSON.stringify({ custom_id: `doc-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'team-model', messages } });
    const file = await client.files.create({ file: await toFile(Buffer.from([line(0, [{ role: 'user', content: 'a' }]), line(1, [{ role: 'user', content: 'b' }]), line(2, 'not a list')].join('\n')), 'docs.jsonl'), purpose: 'batch' });
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await expect.poll(async () => (await client.batches.retrieve(batch.id)).status).toBe('completed');

    await page.click('nav >> text=Batches');
    const row = page.locator(`[data-batch="${batch.id}"]`);
    expect(await row.textContent()).toContain('completed');
    expect(await row.locator('.bar').getAttribute('aria-label')).toBe('2 done, 1 failed of 3');
    // Two replies of 176 uncached, 1,024 cached and 300 output tokens at half of 0.5/0.05/1.5: 295 micro-units each.
    expect(await row.textContent()).toContain('0.00059 USD');
    const width = async (part: string) => (await row.locator(`.bar .${part}`).boundingBox())!.width;
    const whole = (await row.locator('.bar').boundingBox())!.width;
    expect(await width('done')).toBeCloseTo((2 / 3) * whole, 0);
    expect(await width('failed')).toBeCloseTo((1 / 3) * whole, 0);
    await shot(page, '11-batches');
    const output = await (await page.request.get(`${gw.url}/platform/batches/${batch.id}/output`)).text();
    expect(output.trim().split('\n').map((l) => JSON.parse(l).custom_id)).toEqual(['doc-0', 'doc-1']);
    const errors = await (await page.request.get(`${gw.url}/platform/batches/${batch.id}/error`)).text();
    expect(JSON.parse(errors).response.status_code).toBe(400);
    await page.close();

    // Another member sees neither the batch nor its files.
    const other = await browser.newPage();
    await signUp(other, 'other-batches@team.example');
    await other.goto(`${gw.url}/platform/batches`);
    expect(await other.textContent('main')).toContain('No batches yet');
    expect((await other.request.get(`${gw.url}/platform/batches/${batch.id}/output`)).status()).toBe(404);
    await other.close();
  });

  it('refuses a taken email, a weak password and a wrong password with clear messages', async () => {
    const page = await browser.newPage();
    await signUp(page, 'taken@team.example');
    await page.click('button:has-text("Log out")');
    expect(await page.textContent('.notice.success')).toBe('You are logged out.');
    await signUp(page, 'taken@team.example');
    expect(await page.textContent('.notice.error')).toContain('already exists');
    await shot(page, '09-signup-taken');
    await signUp(page, 'weak@team.example', 'aaaaaaaaaaaa');
    expect(await page.textContent('.notice.error')).toContain('too easy to guess');
    await page.goto(`${gw.url}/platform/login`);
    await page.fill('#email', 'taken@team.example');
    await page.fill('#password', 'not the password');
    await page.click('button[type=submit]');
    expect(await page.textContent('.notice.error')).toContain('Wrong email or password');
    await shot(page, '10-login-wrong-password');
    await page.close();
  });

  it('has an icon for the browser tab, at the page\'s link and at /favicon.ico', async () => {
    const page = await browser.newPage();
    await page.goto(`${gw.url}/platform/login`);
    const icon = await page.getAttribute('link[rel=icon]', 'href');
    for (const path of [icon!, '/favicon.ico']) {
      const res = await page.request.get(`${gw.url}${path}`);
      expect(res.status()).toBe(200);
      expect(res.headers()['content-type']).toContain('image/svg+xml');
    }
    await page.close();
  });

  it('lines up each form field with its button, and styles the links in tables', async () => {
    const page = await browser.newPage();
    await signUp(page, 'layout@team.example');
    await page.goto(`${gw.url}/platform/api-keys`);
    const field = (await page.locator('#name').boundingBox())!;
    const button = (await page.locator('button:has-text("Create key")').boundingBox())!;
    expect(Math.abs(field.y + field.height - (button.y + button.height))).toBeLessThanOrEqual(1);
    expect(Math.abs(field.height - button.height)).toBeLessThanOrEqual(1);
    await page.goto(`${gw.url}/platform/models`);
    const link = page.locator('td a').first();
    expect(await link.evaluate((a) => getComputedStyle(a).textDecorationLine)).toBe('none');
    expect(await link.evaluate((a) => getComputedStyle(a).color)).toBe('rgb(47, 91, 234)');
    await page.close();
  });

  it('refuses a post without the CSRF token', async () => {
    const page = await browser.newPage();
    await signUp(page, 'csrf@team.example');
    const res = await page.request.post(`${gw.url}/platform/api-keys`, { form: { name: 'sneaky' } });
    expect(res.status()).toBe(403);
    await page.goto(`${gw.url}/platform/api-keys`);
    expect(await page.textContent('main')).not.toContain('sneaky');
    await page.close();
  });

  it('sets the session cookie HttpOnly and SameSite=Lax', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signUp(page, 'cookie@team.example');
    const session = (await context.cookies()).find((c) => c.name === 'parley_session')!;
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Lax' });
    await context.close();
  });

  it("sets a key's models, budget and expiry when it is made, shows its spend against the budget, and changes them later", async () => {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    await signUp(page, 'limits@team.example');
    const code = await createCreditCode(gw.redis.client, 1_000_000);
    await page.goto(`${gw.url}/platform/top-up`);
    await page.fill('#code', code);
    await page.click('button:has-text("Redeem")');
    await page.goto(`${gw.url}/platform/api-keys`);
    await page.fill('#name', 'budgeted');
    await page.click('text=Limits (optional)');
    await page.check('input[name=models][value=team-model]');
    await page.fill('#new-budget', '0.01');
    await page.selectOption('#new-period', 'day');
    await page.fill('#new-expires', '2030-01-31');
    await page.selectOption('#new-tier', 'priority');
    await page.click('button:has-text("Create key")');
    const key = (await page.textContent('[data-testid=new-key]'))!.trim();
    const row = page.locator('tr', { hasText: 'budgeted' });
    expect(await row.textContent()).toContain('team-model; until 2030-01-31; priority tier');
    expect(await row.locator('[data-testid=spend]').textContent()).toBe('0.00 of 0.01 USD today');
    await shot(page, '07-key-limits');

    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    expect((await client.chat.completions.create({ model: 'team-model', messages: [{ role: 'user', content: 'hi' }] })).service_tier).toBe('priority');
    // 176 uncached prompt tokens at 0.5, 1,024 cached at 0.05 and 300 reply tokens at 1.5 per million: 0.00059.
    // Fetched anew (a reload would post the creation form again).
    await expect.poll(async () => (await page.goto(`${gw.url}/platform/api-keys`), row.locator('[data-testid=spend]').textContent())).toBe('0.00059 of 0.01 USD today');

    await row.locator('summary:has-text("Limits")').click();
    await row.locator('input[name=budget]').fill('0.0001');
    await row.locator('button:has-text("Save limits")').click();
    await expect.poll(() => page.url()).toBe(`${gw.url}/platform/api-keys`);
    expect(await row.locator('[data-testid=spend]').textContent()).toBe('0.00059 of 0.0001 USD today');
    await expect.poll(async () => client.chat.completions.create({ model: 'team-model', messages: [{ role: 'user', content: 'hi' }] }).then(() => 200, (e) => e.status)).toBe(429);
    const audit = await gw.redis.client.xrevrange(redisKeys.audit, '+', '-', 'COUNT', 1);
    expect(audit[0][1]).toEqual(expect.arrayContaining(['actor', 'member:limits@team.example', 'action', 'key.limits']));
    await context.close();
  });

  it('filters usage by key', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signUp(page, 'filter@team.example');
    const code = await createCreditCode(gw.redis.client, 1_000_000);
    await page.goto(`${gw.url}/platform/top-up`);
    await page.fill('#code', code);
    await page.click('button:has-text("Redeem")');
    const keys: string[] = [];
    for (const name of ['used', 'idle']) {
      await page.goto(`${gw.url}/platform/api-keys`);
      await page.fill('#name', name);
      await page.click('button:has-text("Create key")');
      keys.push((await page.textContent('[data-testid=new-key]'))!.trim());
    }
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: keys[0], maxRetries: 0 });
    await client.chat.completions.create({ model: 'team-model', messages: [{ role: 'user', content: 'hi' }] });
    await page.goto(`${gw.url}/platform/usage`);
    await expect.poll(async () => (await page.reload(), page.textContent('main'))).toContain('team-model');
    await page.selectOption('#key', { label: `idle (sk-parley-...${keys[1].slice(-4)})` });
    await page.click('button:has-text("Show")');
    expect(await page.textContent('main')).toContain('No charged requests');
    await page.selectOption('#key', { label: `used (sk-parley-...${keys[0].slice(-4)})` });
    await page.click('button:has-text("Show")');
    expect(await page.textContent('[data-testid=usage-table]')).toContain('team-model');
    await context.close();
  });

  it('limits log-in attempts', async () => {
    const page = await browser.newPage();
    await signUp(page, 'limited@team.example');
    await page.click('button:has-text("Log out")');
    let status = 0;
    for (let i = 0; i < 12 && status !== 429; i++) {
      await page.goto(`${gw.url}/platform/login`);
      const csrf = await page.getAttribute('input[name=_csrf]', 'value');
      status = (await page.request.post(`${gw.url}/platform/login`, { form: { _csrf: csrf!, email: 'limited@team.example', password: `wrong ${i}` } })).status();
    }
    expect(status).toBe(429);
    await page.goto(`${gw.url}/platform/login`);
    await page.fill('#email', 'limited@team.example');
    await page.fill('#password', 'correct horse battery');
    await page.click('button[type=submit]');
    expect(await page.textContent('.notice.error')).toContain('Too many attempts');
    await page.close();
  });

  it('sends to the log-in page without a session', async () => {
    const page = await browser.newPage();
    await page.goto(`${gw.url}/platform/usage`);
    expect(page.url()).toBe(`${gw.url}/platform/login`);
    await shot(page, '00-login');
    await page.close();
  });

  // Last: it stops this file's Redis.
  it('answers a missing page and an unreachable Redis with pages, not JSON', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signUp(page, 'outage@team.example');
    await expect.poll(() => page.url()).toBe(`${gw.url}/platform`);
    const missing = await page.goto(`${gw.url}/platform/no-such-page`);
    expect(missing!.status()).toBe(404);
    expect(await page.textContent('h1')).toBe('Page not found');
    await gw.redis.kill();
    try {
      const down = await page.goto(`${gw.url}/platform/usage`);
      expect(down!.status()).toBe(503);
      expect(down!.headers()['content-type']).toContain('text/html');
      expect(await page.textContent('h1')).toBe('Temporarily unavailable');
      expect(await page.textContent('[role=alert]')).toContain('account store cannot take this request right now');
      await shot(page, '07-unavailable');
    } finally {
      await gw.redis.restart();
      await context.close();
    }
  });
});

describe.runIf(!existsSync(CHROMIUM))('without Chromium', () => {
  it('fails, because the platform must be tested in a browser', () => {
    expect(existsSync(CHROMIUM), 'install the chromium package (scripts/test.sh does)').toBe(true);
  });
});
