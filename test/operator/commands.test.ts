// The operator's commands through the real `parley` bin, against the
// gateway's Redis; and what only a separate process shows: the demo key
// printed once, holds of a replica killed with -9 reclaimed.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { chunk, completionBody, replyJson, sleep, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { TEST_KEY_SECRET, modelEntry, postChat, startTestGateway, type TestGateway } from '../support/gateway.js';
import { runParley, startParleyServe } from '../support/parley-process.js';

const messages = [{ role: 'user' as const, content: 'hello' }];

describe('operator commands', () => {
  let upstream: FakeUpstream;
  let gw: TestGateway;
  let env: Record<string, string>;
  beforeAll(async () => {
    upstream = await startFakeUpstream((_req, res) => {
      replyJson(res, completionBody('hi', { prompt_tokens: 1000, completion_tokens: 500, prompt_tokens_details: { cached_tokens: 200 } }));
    });
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    env = { REDIS_URL: gw.redis.url, PARLEY_KEY_SECRET: TEST_KEY_SECRET };
  });
  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  it('create an account with credit and a key that works at once; grant, list, export usage, revoke', async () => {
    const created = await runParley(['accounts', 'create', '--email', 'ops@team.example', '--credit', '25'], env);
    const key = /API key \(shown once\): (sk-parley-\S+)/.exec(created)![1];
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    await client.chat.completions.create({ model: 'm', messages });

    expect(await runParley(['credit', 'grant', '--account', 'ops@team.example', '--amount', '5', '--note', 'pilot'], env)).toMatch(/balance 29\.99/);
    const list = await runParley(['accounts', 'list'], env);
    expect(list).toMatch(/ops@team\.example\tops\t29\.99\d*\t0\.00\t29\.99/);

    await sleep(100);
    const csv = await runParley(['usage', 'export', '--account', 'ops@team.example'], env);
    const [header, row] = csv.trim().split('\n');
    expect(header).toBe('time,request_id,account,key,model,endpoint,outcome,reason,prompt_tokens,cached_tokens,completion_tokens,cost,charged');
    // 800 × 1 + 200 × 0.1 + 500 × 2 micro-units
    expect(row).toMatch(/,m,.*,complete,,1000,200,500,0\.00182,0\.00182$/);
    // Without --account: every account's events, this one's included.
    expect((await runParley(['usage', 'export'], env)).split('\n')).toContain(row);

    const keys = await runParley(['keys', 'list', '--account', 'ops@team.example'], env);
    const keyId = /^(key_\w+)\tdefault\tsk-parley-\.\.\.(\S{4})/m.exec(keys)!;
    expect(keyId[2]).toBe(key.slice(-4));
    await runParley(['keys', 'revoke', keyId[1]], env);
    await sleep(200);
    await expect(client.chat.completions.create({ model: 'm', messages })).rejects.toMatchObject({ status: 401 });
  });

  it('refuse bad input with a message and change nothing', async () => {
    await expect(runParley(['accounts', 'create', '--email', 'not-an-email'], env)).rejects.toThrow(/not an email address/);
    await expect(runParley(['credit', 'grant', '--account', 'nobody@x.example', '--amount', '5', '--note', 'n'], env)).rejects.toThrow(/no account/);
    await expect(runParley(['credit', 'grant', '--account', gw.account, '--amount', '-5', '--note', 'n'], env)).rejects.toThrow();
    await expect(runParley(['credit', 'grant', '--account', gw.account, '--amount', '5'], env)).rejects.toThrow(/--note is required/);
    expect((await readBalance(gw.redis.client, gw.account))!.granted).toBe(100_000_000);
  });
});

function routingFile(dir: string, config: unknown): string {
  const path = join(dir, 'routing.yaml');
  writeFileSync(path, stringify(config));
  return path;
}

describe('parley serve as a process', () => {
  it('makes a demo account on a fresh data folder and prints its key once', async () => {
    const upstream = await startFakeUpstream((_req, res) => {
      replyJson(res, completionBody('hi', { prompt_tokens: 5, completion_tokens: 5 }));
    });
    const dir = mkdtempSync(join(tmpdir(), 'parley-demo-'));
    const config = routingFile(dir, { models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const args = ['--config', config, '--data-dir', join(dir, 'data')];
    const noSharedRedis = { REDIS_URL: '', PARLEY_KEY_SECRET: '' };
    try {
      const first = await startParleyServe(args, noSharedRedis);
      const key = /^\s+(sk-parley-\S+)$/m.exec(first.output())?.[1];
      expect(key).toBeDefined();
      const balance = await (await fetch(`${first.url}/user/balance`, { headers: { authorization: `Bearer ${key}` } })).json();
      expect(balance.balance_infos[0].total_balance).toBe('10.00');
      expect((await postChat({ url: first.url, apiKey: key! }, { model: 'm', messages })).status).toBe(200);
      await first.stop();

      const second = await startParleyServe(args, noSharedRedis);
      expect(second.output()).not.toContain('sk-parley-');
      // Same private Redis files: the key and its spending survived the restart.
      const after = await (await fetch(`${second.url}/user/balance`, { headers: { authorization: `Bearer ${key}` } })).json();
      expect(Number(after.balance_infos[0].total_balance)).toBeLessThan(10);
      await second.stop();
      expect(readFileSync(join(dir, 'data', 'redis', 'appendonlydir', 'appendonly.aof.manifest'), 'utf8')).toContain('appendonly');
    } finally {
      await upstream.close();
    }
  });

  it('leaves no open hold behind a replica killed with -9 mid-stream', async () => {
    const upstream = await startFakeUpstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < 500 && !res.destroyed; i++) {
        res.write(`data: ${JSON.stringify(chunk({ content: 'tok ' }))}\n\n`);
        await sleep(20);
      }
      res.end();
    });
    const dir = mkdtempSync(join(tmpdir(), 'parley-kill-'));
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const config = routingFile(dir, { billing: { holdTtlMs: 1000 }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    const replica = await startParleyServe(['--config', config, '--data-dir', join(dir, 'data')], { REDIS_URL: gw.redis.url, PARLEY_KEY_SECRET: TEST_KEY_SECRET });
    try {
      const before = (await readBalance(gw.redis.client, gw.account))!;
      const res = await postChat({ url: replica.url, apiKey: gw.apiKey }, { model: 'm', messages, stream: true });
      const reader = res.body!.getReader();
      await reader.read();
      expect((await readBalance(gw.redis.client, gw.account))!.held).toBeGreaterThan(0);
      await replica.stop('SIGKILL');
      await reader.cancel().catch(() => {});
      await sleep(1_300);
      expect(await readBalance(gw.redis.client, gw.account)).toEqual({ ...before, held: 0 });
    } finally {
      await replica.stop('SIGKILL');
      await gw.close();
      await upstream.close();
    }
  });
});
