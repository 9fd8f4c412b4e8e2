// The admin HTTP API, driven with plain fetch from its own OpenAPI document:
// every call a test makes is looked up there first (method, path, and the
// request body's required fields). It does what the operator's commands do,
// a retried grant is applied once, every change is in the audit stream (the
// API's token name, or cli), and unauthorized or malformed calls change nothing.
import { describe, expect, it } from 'vitest';
import { findAccountByEmail } from '../../src/accounts/accounts.js';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { redisKeys } from '../../src/redis/keys.js';
import { completionBody, replyJson } from '../support/fake-upstream.js';
import { asAdmin, modelEntry, postChat, TEST_KEY_SECRET, withGatewayOn, type TestGateway } from '../support/gateway.js';
import { runParley } from '../support/parley-process.js';

type OpenApi = { openapi: string; paths: Record<string, Record<string, { requestBody?: { content: { 'application/json': { schema: { required?: string[]; properties: Record<string, unknown> } } } } }>> };

/** A client made from the document: each call names an operation the document lists, with a body its schema requires. */
async function adminClient(gw: TestGateway) {
  const doc = (await (await fetch(`${gw.url}/admin/v1/openapi.json`, { headers: asAdmin })).json()) as OpenApi;
  return {
    doc,
    async call(method: string, template: string, params: string[] = [], body?: Record<string, unknown>, headers: Record<string, string> = {}, query = '') {
      const operation = doc.paths[template]?.[method.toLowerCase()];
      if (!operation) throw new Error(`the OpenAPI document has no ${method} ${template}`);
      const schema = operation.requestBody?.content['application/json'].schema;
      if (body) for (const field of schema?.required ?? []) expect(body, `${method} ${template} requires ${field}`).toHaveProperty(field);
      let path = template;
      for (const p of params) path = path.replace(/\{\w+\}/, encodeURIComponent(p));
      const res = await fetch(`${gw.url}${path}${query}`, {
        method,
        headers: { ...asAdmin, ...(body ? { 'content-type': 'application/json' } : {}), ...headers },
        body: body ? JSON.stringify(body) : undefined,
      });
      return { status: res.status, body: res.headers.get('content-type')?.startsWith('application/json') ? await res.json() : await res.text() };
    },
  };
}

const answer = (_req: unknown, res: Parameters<typeof replyJson>[0]) => replyJson(res, completionBody('ok', { prompt_tokens: 3, completion_tokens: 1 }));
const oneModel = ([url]: string[]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }])] });
const messages = [{ role: 'user' as const, content: 'hi' }];

describe('the admin API', () => {
  it('serves an OpenAPI 3.1 document made from the schemas that validate each call', async () => {
    await withGatewayOn([answer], oneModel, async (gw) => {
      const { doc } = await adminClient(gw);
      expect(doc.openapi).toBe('3.1.0');
      expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/admin/v1/accounts', '/admin/v1/accounts/{account}/credit', '/admin/v1/keys/{key}', '/admin/v1/usage.csv', '/admin/v1/audit']));
      const grant = doc.paths['/admin/v1/accounts/{account}/credit'].post.requestBody!.content['application/json'].schema;
      expect(grant.required).toEqual(['kind', 'amount', 'note']);
      expect(grant.properties.kind).toEqual({ type: 'string', enum: ['grant', 'deduct'] });
    });
  });

  it('does what the operator commands do, applies a retried grant once, and audits every change', async () => {
    await withGatewayOn([answer], oneModel, async (gw) => {
      const admin = await adminClient(gw);
      const made = await admin.call('POST', '/admin/v1/accounts', [], { email: 'api@team.example', credit: '1' });
      expect(made.status).toBe(200);
      const account = made.body.account.id;
      expect(made.body.account).toMatchObject({ email: 'api@team.example', balance: '1.00' });
      expect((await admin.call('GET', '/admin/v1/accounts')).body.map((a: { id: string }) => a.id)).toContain(account);
      expect((await admin.call('POST', '/admin/v1/accounts/{account}/members', [account], { email: 'second@team.example', password: 'a long passphrase' })).body).toEqual({ account, members: ['api@team.example', 'second@team.example'] });
      expect((await findAccountByEmail(gw.redis.client, 'second@team.example'))!.id).toBe(account);
      expect((await admin.call('POST', '/admin/v1/accounts/{account}/members', [gw.account], { email: 'second@team.example', password: 'a long passphrase' })).status).toBe(409);
      expect((await admin.call('GET', '/admin/v1/accounts/{account}/members', ['second@team.example'])).body.members).toHaveLength(2);

      // Five retries of one grant, at once: applied once.
      const grants = await Promise.all(Array.from({ length: 5 }, () => admin.call('POST', '/admin/v1/accounts/{account}/credit', [account], { kind: 'grant', amount: '2.5', note: 'pilot' }, { 'idempotency-key': 'grant-42' })));
      expect(grants.map((g) => g.status)).toEqual([200, 200, 200, 200, 200]);
      expect(grants.filter((g) => g.body.applied)).toHaveLength(1);
      expect(grants.every((g) => g.body.balance === '3.50')).toBe(true);
      expect((await readBalance(gw.redis.client, account))!.granted).toBe(3_500_000);

      const key = await admin.call('POST', '/admin/v1/accounts/{account}/keys', [account], { name: 'ci', models: ['m'], budget: '0.5', budgetPeriod: 'day' });
      expect(key.body.key).toMatchObject({ name: 'ci', models: ['m'], budget: '0.50', budgetPeriod: 'day', spentThisPeriod: '0.00' });
      expect((await postChat({ url: gw.url, apiKey: key.body.apiKey }, { model: 'm', messages })).status).toBe(200);
      const patched = await admin.call('PATCH', '/admin/v1/keys/{key}', [key.body.key.id], { budget: null, expiresAt: '2030-01-01T00:00:00Z' });
      expect(patched.body).toMatchObject({ budget: null, expiresAt: '2030-01-01T00:00:00.000Z' });
      expect((await admin.call('PUT', '/admin/v1/accounts/{account}/rate-limits', [account], { requestsPerMinute: 100, tokensPerMinute: null, concurrentRequests: 4 })).body).toMatchObject({ requestsPerMinute: 100, concurrentRequests: 4 });
      // Left out, the bound of requests in flight stays; null clears it.
      expect((await admin.call('PUT', '/admin/v1/accounts/{account}/rate-limits', [account], { requestsPerMinute: 100, tokensPerMinute: null })).body).toMatchObject({ concurrentRequests: 4 });
      expect((await admin.call('PUT', '/admin/v1/accounts/{account}/rate-limits', [account], { requestsPerMinute: 100, tokensPerMinute: null, concurrentRequests: null })).body).toMatchObject({ concurrentRequests: null });
      const codes = await admin.call('POST', '/admin/v1/credit-codes', [], { amount: '1', count: 2 });
      expect(codes.body.codes).toHaveLength(2);
      expect((await admin.call('DELETE', '/admin/v1/keys/{key}', [key.body.key.id])).body).toEqual({ id: key.body.key.id, revoked: true });
      await expect.poll(async () => (await postChat({ url: gw.url, apiKey: key.body.apiKey }, { model: 'm', messages })).status).toBe(401);
      const csv = await admin.call('GET', '/admin/v1/usage.csv', [], undefined, {}, `?account=${account}`);
      expect(csv.body.split('\n')[0]).toContain('request_id');
      expect(csv.body.split('\n').filter(Boolean)).toHaveLength(2);

      // The command's changes are audited too, as cli.
      const env = { REDIS_URL: gw.redis.url, PARLEY_KEY_SECRET: TEST_KEY_SECRET };
      await runParley(['credit', 'deduct', '--account', account, '--amount', '0.5', '--note', 'refund', '--data-dir', gw.dataDir], env);
      const audit = (await admin.call('GET', '/admin/v1/audit')).body as { actor: string; action: string; target: string; before: unknown; after: unknown }[];
      expect(audit.map((e) => [e.actor, e.action])).toEqual([
        ['cli', 'credit.deduct'], ['admin-token', 'key.revoke'], ['admin-token', 'credit-codes.create'], ['admin-token', 'account.limits'], ['admin-token', 'account.limits'], ['admin-token', 'account.limits'],
        ['admin-token', 'key.limits'], ['admin-token', 'key.create'], ['admin-token', 'credit.grant'], ['admin-token', 'member.add'], ['admin-token', 'account.create'],
      ]);
      expect(audit[0]).toMatchObject({ target: account, before: { balance: '3.499995' }, after: { balance: '2.999995', amount: '0.50', note: 'refund' } });
      expect(JSON.stringify(audit)).not.toContain(codes.body.codes[0]);
      const listed = await runParley(['audit', 'list', '--count', '2', '--data-dir', gw.dataDir], env);
      expect(listed.split('\n').filter(Boolean).map((l) => l.split('\t').slice(1, 3))).toEqual([['actor', 'action'], ['cli', 'credit.deduct'], ['admin-token', 'key.revoke']]);
    });
  });

  it('changes nothing for an unauthorized or malformed call, and answers each in OpenAI error shape', async () => {
    await withGatewayOn([answer], oneModel, async (gw) => {
      const admin = await adminClient(gw);
      const before = { balance: await readBalance(gw.redis.client, gw.account), audit: await gw.redis.client.xlen(redisKeys.audit) };
      const grant = (headers: Record<string, string>, body: string) =>
        fetch(`${gw.url}/admin/v1/accounts/${gw.account}/credit`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
      const good = JSON.stringify({ kind: 'grant', amount: '5', note: 'x' });
      expect((await grant({}, good)).status).toBe(401);
      expect((await grant({ authorization: 'Bearer nope' }, good)).status).toBe(401);
      const malformed = [
        await grant(asAdmin, '{"kind": "grant", "amount": '),
        await grant(asAdmin, JSON.stringify({ kind: 'gift', amount: '5', note: 'x' })),
        await grant(asAdmin, JSON.stringify({ kind: 'grant', amount: '-5', note: 'x' })),
        await grant(asAdmin, JSON.stringify({ kind: 'grant', amount: '5' })),
      ];
      expect(malformed.map((r) => r.status)).toEqual([400, 400, 400, 400]);
      for (const r of malformed) expect(Object.keys((await r.json()).error)).toEqual(['message', 'type', 'param', 'code']);
      expect((await admin.call('POST', '/admin/v1/accounts/{account}/credit', ['acct_nobody'], { kind: 'grant', amount: '5', note: 'x' })).status).toBe(404);
      expect((await admin.call('PATCH', '/admin/v1/keys/{key}', ['key_nobody'], { models: null })).status).toBe(404);
      expect((await admin.call('POST', '/admin/v1/accounts', [], { email: 'not an email' })).status).toBe(400);
      const badDay = await admin.call('GET', '/admin/v1/usage.csv', [], undefined, {}, '?since=yesterday');
      expect(badDay).toMatchObject({ status: 400, body: { error: { message: 'since: "yesterday" is not a date (YYYY-MM-DD)' } } });
      expect({ balance: await readBalance(gw.redis.client, gw.account), audit: await gw.redis.client.xlen(redisKeys.audit) }).toEqual(before);
    });
  });
});
