// Hostile and malformed requests to every public route, as a security
// reviewer sends them: bad percent-encoding, bad cookies, invalid JSON, wrong
// types, huge numbers, JSON nested 10,000 deep, lone surrogates, long strings,
// odd methods, stalled bodies. Every answer is a 4xx in the route's own error
// shape (OpenAI's, Anthropic's, the admin API's, a platform page), never a
// 5xx, a hang or a crash; balances change only for replies delivered whole,
// and nothing is left held.
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { redisKeys } from '../../src/redis/keys.js';
import { completionBody, replyJson, type FakeUpstream } from '../support/fake-upstream.js';
import { asAdmin, makeAccount, modelEntry, startGatewayOn, type GatewayOnUpstreams, type TestGateway } from '../support/gateway.js';

let running: GatewayOnUpstreams;
let upstream: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  running = await startGatewayOn(
    [
      (req, res) => {
        if (req.path.endsWith('/embeddings')) return replyJson(res, { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1] }], model: 'm', usage: { prompt_tokens: 2, total_tokens: 2 } });
        replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }));
      },
    ],
    ([url]) => ({
      gateway: { requestReadTimeoutMs: 1000 },
      models: [modelEntry('m', [{ kind: 'vllm', url }], { api: ['chat', 'completions', 'embeddings'] })],
    }),
  );
  ({ gw, upstreams: [upstream] } = running);
});
afterAll(() => running.close());

type Shape = 'openai' | 'anthropic' | 'page';

async function call(method: string, path: string, init: { body?: string; headers?: Record<string, string> } = {}) {
  const res = await fetch(`${gw.url}${path}`, { method, body: init.body, headers: { authorization: `Bearer ${gw.apiKey}`, 'content-type': 'application/json', ...init.headers }, redirect: 'manual' });
  return { status: res.status, text: await res.text(), type: res.headers.get('content-type') ?? '' };
}

/** A 4xx in the route's own error shape. */
function expectRefusal(answer: { status: number; text: string; type: string }, shape: Shape, what: string): void {
  expect(answer.status, `${what}: ${answer.text.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
  expect(answer.status, what).toBeLessThan(500);
  if (shape === 'page') return void expect(answer.type, what).toContain('text/html');
  const body = JSON.parse(answer.text);
  if (shape === 'anthropic') {
    expect(body.type, what).toBe('error');
    expect(body.error.type, what).toBeTypeOf('string');
  } else {
    expect(body.error.type, what).toBeTypeOf('string');
    expect(body.error.message, what).toBeTypeOf('string');
  }
}

const nested = (depth: number, leaf: unknown = 1): unknown => {
  let value = leaf;
  for (let i = 0; i < depth; i++) value = { a: value };
  return value;
};

const GENERATION_ROUTES: { path: string; shape: Shape; valid: Record<string, unknown> }[] = [
  { path: '/v1/chat/completions', shape: 'openai', valid: { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 } },
  { path: '/v1/completions', shape: 'openai', valid: { model: 'm', prompt: 'hi', max_tokens: 4 } },
  { path: '/v1/embeddings', shape: 'openai', valid: { model: 'm', input: 'hi' } },
  { path: '/v1/messages', shape: 'anthropic', valid: { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] } },
  { path: '/v1/messages/count_tokens', shape: 'anthropic', valid: { model: 'm', messages: [{ role: 'user', content: 'hi' }] } },
  { path: '/v1/responses', shape: 'openai', valid: { model: 'm', input: 'hi', max_output_tokens: 16 } },
];

/** Bodies no client should send: each must be refused. */
function hostileBodies(valid: Record<string, unknown>): [string, string][] {
  const deep = nested(10_000);
  const bodies: [string, unknown][] = [
    ['a string', 'hello'],
    ['an array', [valid]],
    ['null', null],
    ['model a number', { ...valid, model: 12 }],
    ['model 3 MB long', { ...valid, model: 'x'.repeat(3_000_000) }],
    ['model a lone surrogate', { ...valid, model: '\ud800' }],
    ['max_tokens huge', { ...valid, max_tokens: 1e308, max_output_tokens: 1e308 }],
    ['max_tokens negative', { ...valid, max_tokens: -1, max_output_tokens: -1 }],
    ['temperature a string', { ...valid, temperature: 'hot' }],
    ['n huge', { ...valid, n: 2 ** 64 }],
    ['response_format nested 10,000 deep', { ...valid, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: deep } } }],
    ['tool parameters nested 10,000 deep', { ...valid, tools: [{ type: 'function', function: { name: 'f', parameters: deep } }] }],
    ['input_schema nested 10,000 deep', { ...valid, tools: [{ name: 'f', input_schema: deep }] }],
    ['text.format.schema nested 10,000 deep', { ...valid, text: { format: { type: 'json_schema', name: 'x', schema: deep } } }],
    ['tool_use.input nested 10,000 deep', { ...valid, messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: deep }] }, { role: 'user', content: 'x' }] }],
    ['an unknown item nested 10,000 deep', { ...valid, input: [{ type: 'mystery', payload: deep }] }],
    ['a prompt of token ids out of range', { ...valid, prompt: [[1e300]] }],
  ];
  const raw: [string, string][] = [
    ['invalid JSON', '{"model": '],
    ['empty', ''],
    ['JSON nested 10,000 deep', '['.repeat(10_000) + ']'.repeat(10_000)],
  ];
  // A JSON.stringify of 10,000 levels would itself overflow: the deep bodies are written by hand.
  const text = (v: unknown) => JSON.stringify(v, (_k, x) => (x === deep ? '__DEEP__' : x)).replace('"__DEEP__"', '{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000));
  return [...raw, ...bodies.map(([name, body]): [string, string] => [name, text(body)])];
}

describe('hostile input to every public route', () => {
  it('generation routes refuse every hostile body in their own error shape, charge nothing and call no upstream', async () => {
    const before = (await readBalance(gw.redis.client, gw.account))!;
    const calls = upstream.received.length;
    for (const route of GENERATION_ROUTES) {
      for (const [name, body] of hostileBodies(route.valid)) {
        const answer = await call('POST', route.path, { body });
        // A body that is still a valid request (an unknown field the API ignores) may be served.
        if (answer.status === 200) continue;
        expectRefusal(answer, route.shape, `${route.path}: ${name}`);
      }
      // Wrong methods on the route.
      expectRefusal(await call('PUT', route.path, { body: JSON.stringify(route.valid) }), route.shape, `PUT ${route.path}`);
    }
    const after = (await readBalance(gw.redis.client, gw.account))!;
    const servedCalls = upstream.received.length - calls;
    // Only the bodies that were valid requests reached the upstream, and only those are charged.
    if (servedCalls === 0) expect(after.granted).toBe(before.granted);
    expect(after.held).toBe(0);
  });

  it('malformed percent-encoding in a path is a 4xx on every route that decodes one', async () => {
    for (const path of ['/v1/models/%E0', '/v1/models/%', '/v1/responses/%E0', '/v1/responses/%']) {
      expectRefusal(await call('GET', path), 'openai', path);
    }
    expectRefusal(await call('DELETE', '/v1/responses/%E0'), 'openai', 'DELETE /v1/responses/%E0');
    expectRefusal(await call('GET', '/admin/v1/accounts/%E0', { headers: asAdmin }), 'openai', 'admin account');
    expectRefusal(await call('DELETE', '/admin/v1/keys/%E0', { headers: asAdmin }), 'openai', 'admin key revoke');
    expectRefusal(await call('PATCH', '/admin/v1/keys/%E0', { headers: asAdmin, body: '{}' }), 'openai', 'admin key limits');
    const session = await platformSession();
    expectRefusal(await call('GET', '/platform/models/%E0', { headers: { cookie: session } }), 'page', 'platform model page');
  });

  it('a cookie that does not decode is skipped: no 503 and no false outage message, logged in or out', async () => {
    const out = await call('GET', '/platform', { headers: { cookie: 'a=%E0' } });
    expect(out.status).toBe(303);
    const login = await call('GET', '/platform/login', { headers: { cookie: 'a=%E0; parley_csrf=%' } });
    expect(login.status).toBe(200);
    expect(login.text).not.toContain('cannot reach');
    const session = await platformSession();
    const page = await call('GET', '/platform', { headers: { cookie: `a=%E0; ${session}` } });
    expect(page.status).toBe(200);
  });

  it('usage from a date before 1970 is an empty range, not a 503 page or a cut CSV', async () => {
    const session = await platformSession();
    const page = await call('GET', '/platform/usage?from=0000-01-01', { headers: { cookie: session } });
    expect(page.status).toBe(200);
    const csv = await call('GET', `/admin/v1/usage.csv?since=0000-01-01&account=${gw.account}`, { headers: asAdmin });
    expect(csv.status).toBe(200);
    await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${gw.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify(GENERATION_ROUTES[0].valid) });
    await expect.poll(async () => (await call('GET', `/admin/v1/usage.csv?since=0000-01-01&account=${gw.account}`, { headers: asAdmin })).text.trim().split('\n').length, { timeout: 5000 }).toBeGreaterThan(1);
  });

  it("admin: an over-long email is a 400, not the account store's 503", async () => {
    const answer = await call('POST', '/admin/v1/accounts', { headers: asAdmin, body: JSON.stringify({ email: `${'a'.repeat(300)}@example.com` }) });
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text).error.message).toMatch(/^email/);
  });

  it('admin: a grant past the largest balance, zero or negative is a 400 and moves nothing', async () => {
    const before = (await readBalance(gw.redis.client, gw.account))!;
    for (const amount of ['99999999999999999999', '1000000001', '0', '-5', '1e9', '0.0000001']) {
      const answer = await call('POST', `/admin/v1/accounts/${gw.account}/credit`, { headers: asAdmin, body: JSON.stringify({ kind: 'grant', amount, note: 'x' }) });
      expect(answer.status, amount).toBe(400);
    }
    // Grants that each fit but together pass the most a balance may be: the one that would pass it is refused.
    const big = await call('POST', `/admin/v1/accounts/${gw.account}/credit`, { headers: asAdmin, body: JSON.stringify({ kind: 'grant', amount: '999999000', note: 'x' }) });
    expect(big.status).toBe(200);
    const over = await call('POST', `/admin/v1/accounts/${gw.account}/credit`, { headers: asAdmin, body: JSON.stringify({ kind: 'grant', amount: '999999000', note: 'x' }) });
    expect(over.status).toBe(400);
    const back = await call('POST', `/admin/v1/accounts/${gw.account}/credit`, { headers: asAdmin, body: JSON.stringify({ kind: 'deduct', amount: '999999000', note: 'x' }) });
    expect(back.status).toBe(200);
    expect((await readBalance(gw.redis.client, gw.account))!.granted).toBe(before.granted);
  });

  it('admin: a key that would expire in the past is refused at creation', async () => {
    const answer = await call('POST', `/admin/v1/accounts/${gw.account}/keys`, { headers: asAdmin, body: JSON.stringify({ name: 'old', expiresAt: '1970-01-01T00:00:00Z' }) });
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text).error.message).toMatch(/^expiresAt/);
  });

  it('usage CSVs neutralise cells a spreadsheet would run as formulas', async () => {
    const { account, key } = await makeAccount(gw.redis, 5);
    for (const user of ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", '@SUM(1+1)', '-2+3']) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ ...GENERATION_ROUTES[0].valid, user }) });
      expect(res.status).toBe(200);
    }
    await expect.poll(async () => (await call('GET', `/admin/v1/usage.csv?account=${account}`, { headers: asAdmin })).text.trim().split('\n').length, { timeout: 5000 }).toBe(5);
    const csv = (await call('GET', `/admin/v1/usage.csv?account=${account}`, { headers: asAdmin })).text;
    const session = await platformSession(account);
    const platformCsv = (await call('GET', '/platform/usage.csv', { headers: { cookie: session } })).text;
    for (const text of [csv, platformCsv]) {
      const cells = text.trim().split('\n').slice(1).flatMap((line) => line.split(','));
      expect(cells.some((c) => /^"?[=+\-@]/.test(c))).toBe(false);
      expect(text).toContain(`"'=HYPERLINK(""http://x""`);
      expect(text).toContain("'@SUM(1+1)");
    }
  });

  it('a body that stalls half-way is answered 408 and its connection closed, on every route', async () => {
    for (const path of ['/v1/chat/completions', '/platform/login', '/admin/v1/accounts']) {
      const started = Date.now();
      const answer = await stalledBody(path, path.startsWith('/admin') ? asAdmin.authorization : `Bearer ${gw.apiKey}`);
      expect(answer, path).toMatch(/^HTTP\/1\.1 408/);
      expect(Date.now() - started, path).toBeLessThan(4000);
    }
  });

  it('a 3 MB model name makes a bounded error message, log line and no metrics series of its own', async () => {
    const name = `m-${randomBytes(8).toString('hex')}${'x'.repeat(3_000_000)}`;
    const lines: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string) => (lines.push(String(chunk)), true)) as typeof process.stdout.write;
    gw.writeConfig({ gateway: { requestReadTimeoutMs: 1000, requestLog: true }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }], { api: ['chat', 'completions', 'embeddings'] })] });
    try {
      await expect.poll(() => gw.context.routing().settings.requestLog, { timeout: 5000 }).toBe(true);
      const answer = await call('POST', '/v1/chat/completions', { body: JSON.stringify({ model: name, messages: [{ role: 'user', content: 'x' }] }) });
      expect(answer.status).toBe(404);
      expect(answer.text.length).toBeLessThan(2000);
      await expect.poll(() => lines.join('').includes('"status":404'), { timeout: 3000 }).toBe(true);
    } finally {
      process.stdout.write = write;
    }
    expect(Math.max(...lines.map((l) => l.length))).toBeLessThan(4000);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).not.toContain(name.slice(0, 18));
  });
});

/** A logged-in member's cookie for `account` (the gateway's own by default). */
async function platformSession(account = gw.account): Promise<string> {
  const id = randomBytes(32).toString('base64url');
  await gw.redis.client.hset(redisKeys.session(id), { account, email: 'member@example.com' });
  return `parley_session=${id}`;
}

/** Sends headers and half a body, then nothing: what the server answers (or '' when it only hangs up). */
function stalledBody(path: string, authorization: string): Promise<string> {
  const url = new URL(gw.url);
  return new Promise((resolve) => {
    const socket = connect(Number(url.port), url.hostname, () => {
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${authorization}\r\nContent-Type: ${path.startsWith('/platform') ? 'application/x-www-form-urlencoded' : 'application/json'}\r\nContent-Length: 100\r\n\r\n{"model":`);
    });
    let text = '';
    socket.on('data', (c) => (text += c));
    socket.on('close', () => resolve(text));
    socket.on('error', () => resolve(text));
    setTimeout(() => socket.destroy(), 10_000);
  });
}
