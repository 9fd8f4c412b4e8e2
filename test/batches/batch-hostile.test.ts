// What a careless or hostile client sends the batch APIs: malformed paths,
// ids and page sizes, oversized metadata, bodies of the wrong kind. Each is
// answered with a 4xx in the API's own error shape, and leaves nothing
// behind: no file, no batch, no charge.
import { describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { greeting } from '../support/fake-upstream.js';
import { modelEntry, withGatewayOn } from '../support/gateway.js';

describe('the batch APIs under hostile input', () => {
  it('answer each malformed request with a 4xx in the API\'s error shape, and change nothing', async () => {
    await withGatewayOn([greeting()], ([url]) => ({ models: [modelEntry('m', [{ kind: 'vllm', url }])] }), async (gw) => {
      const before = await readBalance(gw.redis.client, gw.account);
      // The fleet's own bookkeeping (its load, the rate windows that count the calls) is not the tenant's state.
      // Everything but rate windows and the fleet's routing state, which its replicas write in the background.
      const tenantKeys = async () => (await gw.redis.client.keys('*')).filter((k) => !k.includes(':ratelimit:') && k !== 'parley:fleet-load' && !k.includes('{affinity-keys:')).sort();
      const keysBefore = await tenantKeys();
      const openai = { authorization: `Bearer ${gw.apiKey}` };
      const anthropic = { 'x-api-key': gw.apiKey, 'anthropic-version': '2023-06-01' };
      const json = (body: unknown) => ({ body: typeof body === 'string' ? body : JSON.stringify(body), headers: { 'content-type': 'application/json' } });
      const form = (parts: [string, string, string?][]) => {
        const f = new FormData();
        for (const [name, value, filename] of parts) {
          if (filename) f.append(name, new Blob([value]), filename);
          else f.append(name, value);
        }
        return { body: f };
      };
      const cases: [string, string, Record<string, string>, { body?: BodyInit; headers?: Record<string, string> }?][] = [
        ['GET', '/v1/files/%E0', openai],
        ['GET', '/v1/files/..%2F..%2Fapikey', openai],
        ['GET', '/v1/files/file-x/content/more', openai],
        ['GET', '/v1/files?limit=-1', openai],
        ['GET', '/v1/files?limit=1e9', openai],
        ['GET', '/v1/files?limit=abc', openai],
        ['GET', '/v1/files?order=sideways', openai],
        ['POST', '/v1/files', openai, json({ purpose: 'batch' })],
        ['POST', '/v1/files', openai, { body: 'x', headers: { 'content-type': 'multipart/form-data' } }],
        ['POST', '/v1/files', openai, form([['purpose', 'batch'], ['file', 'not a file part']])],
        ['POST', '/v1/files', openai, form([['purpose', 'assistants'], ['file', '{}', 'x.jsonl']])],
        ['POST', '/v1/batches', openai, json('{not json')],
        ['POST', '/v1/batches', openai, json({ input_file_id: 'file-x', endpoint: '/v1/chat/completions', completion_window: '1h' })],
        ['POST', '/v1/batches', openai, json({ input_file_id: 'file-x', endpoint: '/v1/chat/completions', completion_window: '24h', metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) })],
        ['POST', '/v1/batches', openai, json({ input_file_id: 'file-x', endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { k: 'v'.repeat(513) } })],
        ['POST', '/v1/batches', openai, json({ input_file_id: ['file-x'], endpoint: '/v1/chat/completions', completion_window: '24h' })],
        ['GET', '/v1/batches?limit=101', openai],
        ['GET', '/v1/batches/batch_nope', openai],
        ['GET', '/v1/batches/msgbatch_nope', openai],
        ['POST', '/v1/batches/batch_nope/cancel', openai],
        ['DELETE', '/v1/batches/batch_nope', openai],
        ['POST', '/v1/messages/batches', anthropic, json({ requests: [] })],
        ['POST', '/v1/messages/batches', anthropic, json({ requests: 'all of them' })],
        ['POST', '/v1/messages/batches', anthropic, json({ requests: [{ custom_id: 'a'.repeat(65), params: { model: 'm' } }] })],
        ['POST', '/v1/messages/batches', anthropic, json({ requests: [{ custom_id: 'a', params: { max_tokens: 4 } }] })],
        ['POST', '/v1/messages/batches', anthropic, json({ requests: [{ custom_id: 12, params: { model: 'm' } }] })],
        ['GET', '/v1/messages/batches?limit=0', anthropic],
        ['GET', '/v1/messages/batches/batch_nope', anthropic],
        ['GET', '/v1/messages/batches/msgbatch_nope/results', anthropic],
        ['POST', '/v1/messages/batches/msgbatch_nope/cancel', anthropic],
        ['DELETE', '/v1/messages/batches/msgbatch_nope', anthropic],
      ];
      for (const [method, path, auth, init] of cases) {
        const res = await fetch(`${gw.url}${path}`, { method, ...init, headers: { ...auth, ...init?.headers } });
        const label = `${method} ${path} ${String(init?.body ?? '').slice(0, 60)}`;
        expect(res.status, label).toBeGreaterThanOrEqual(400);
        expect(res.status, label).toBeLessThan(500);
        const body = await res.json();
        if ('x-api-key' in auth) expect(body, label).toMatchObject({ type: 'error', error: { type: expect.any(String), message: expect.any(String) } });
        else expect(body, label).toMatchObject({ error: { type: expect.any(String), message: expect.any(String) } });
      }
      // Listing with a cursor that names nothing is an empty page, not an error.
      expect(await (await fetch(`${gw.url}/v1/messages/batches?before_id=msgbatch_nothing`, { headers: anthropic })).json()).toMatchObject({ data: [], has_more: false });
      expect(await (await fetch(`${gw.url}/v1/batches?after=batch_nothing`, { headers: openai })).json()).toMatchObject({ data: [], has_more: false });
      // Nothing was stored or charged.
      expect(await tenantKeys()).toEqual(keysBefore);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
    });
  });
});
