// The operator's commands through the real `parley` bin, against the
// gateway's Redis; and what only a separate process shows: the demo key
// printed once, holds of a replica killed with -9 reclaimed.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect, createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import OpenAI from 'openai';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { chunk, completionBody, replyJson, sleep, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { TEST_KEY_SECRET, modelEntry, postChat, startTestGateway, type TestGateway } from '../support/gateway.js';
import { runParley, runParleyFailing, spawnParley, startParleyServe, type ParleyProcess } from '../support/parley-process.js';

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

  it('create a key limited to models and an expiry, change and clear its limits, and list them', async () => {
    await runParley(['accounts', 'create', '--email', 'limits@team.example', '--credit', '1'], env);
    const created = await runParley(['keys', 'create', '--account', 'limits@team.example', '--name', 'search', '--models', 'm,other', '--expires', '2026-12-31T00:00:00Z'], env);
    expect(created).toMatch(/^key (key_\w+) for \S+: m,other, until 2026-12-31T00:00:00.000Z, no budget, default tier$/m);
    const keyId = /^key (key_\w+)/m.exec(created)![1];
    const key = /API key \(shown once\): (sk-parley-\S+)/.exec(created)![1];
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
    expect((await client.chat.completions.create({ model: 'm', messages })).choices).toHaveLength(1);

    expect(await runParley(['keys', 'limits', keyId, '--models', 'other'], env)).toBe(`key ${keyId}: other, until 2026-12-31T00:00:00.000Z, no budget, default tier\n`);
    await sleep(200);
    await expect(client.chat.completions.create({ model: 'm', messages })).rejects.toMatchObject({ status: 404 });
    expect(await runParley(['keys', 'limits', keyId, '--models', '', '--expires', ''], env)).toBe(`key ${keyId}: any model, no expiry, no budget, default tier\n`);
    expect(await runParley(['keys', 'limits', keyId, '--tier', 'priority'], env)).toBe(`key ${keyId}: any model, no expiry, no budget, priority tier\n`);
    expect(await runParley(['keys', 'list', '--account', 'limits@team.example'], env)).toMatch(new RegExp(`^${keyId}\tsearch\t.*\tany model\tno expiry\tno budget\tpriority tier\t-$`, 'm'));
    expect((await runParleyFailing(['keys', 'limits', keyId, '--tier', 'gold'], env)).stderr).toContain('tier');
    const refused = await runParleyFailing(['keys', 'limits', keyId, '--expires', 'next tuesday'], env);
    expect(refused.stderr).toContain('expiresAt: Invalid ISO datetime');
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
    expect(header).toBe('time,request_id,account,key,model,endpoint,outcome,reason,prompt_tokens,cached_tokens,completion_tokens,cost,charged,user,api,reply_id,service_tier');
    // 800 × 1 + 200 × 0.1 + 500 × 2 micro-units
    expect(row).toMatch(/,m,.*,complete,,1000,200,500,0\.00182,0\.00182,,chat,chatcmpl-[\w-]+,default$/);
    // Without --account: every account's events, this one's included.
    expect((await runParley(['usage', 'export'], env)).split('\n')).toContain(row);

    const keys = await runParley(['keys', 'list', '--account', 'ops@team.example'], env);
    const keyId = /^(key_\w+)\tdefault\tsk-parley-\.\.\.(\S{4})/m.exec(keys)!;
    expect(keyId[2]).toBe(key.slice(-4));
    await runParley(['keys', 'revoke', keyId[1]], env);
    await sleep(200);
    await expect(client.chat.completions.create({ model: 'm', messages })).rejects.toMatchObject({ status: 401 });
  });

  it('usage export stops quietly when its reader closes the pipe (| head)', async () => {
    const exporting = spawnParley(['usage', 'export'], env);
    exporting.stdout!.destroy();
    let stderr = '';
    exporting.stderr!.on('data', (d) => (stderr += d));
    const code = await new Promise((resolve) => exporting.once('exit', resolve));
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });

  it('refuse bad input with a message and change nothing', async () => {
    await expect(runParley(['accounts', 'create', '--email', 'not-an-email'], env)).rejects.toThrow(/email: an email address/);
    await expect(runParley(['credit', 'grant', '--account', 'nobody@x.example', '--amount', '5', '--note', 'n'], env)).rejects.toThrow(/no account/);
    await expect(runParley(['credit', 'grant', '--account', gw.account, '--amount', '-5', '--note', 'n'], env)).rejects.toThrow(/--amount/);
    await expect(runParley(['credit', 'grant', '--account', gw.account, '--amount', '5.1234567', '--note', 'n'], env)).rejects.toThrow(/amount: an amount in the account currency/);
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
      // Run as the bin is (npm start, the quickstart, the image): Node with the young generation Parley is tuned for.
      expect(readFileSync(`/proc/${first.child.pid}/cmdline`, 'utf8').split('\0')).toContain('--max-semi-space-size=64');
      const key = /^\s+(sk-parley-\S+)$/m.exec(first.output())?.[1];
      expect(key).toBeDefined();
      const balance = await (await fetch(`${first.url}/user/balance`, { headers: { authorization: `Bearer ${key}` } })).json();
      expect(balance.balance_infos[0].total_balance).toBe('10.00');
      expect((await postChat({ url: first.url, apiKey: key! }, { model: 'm', messages })).status).toBe(200);
      // The demo member logs in to the platform with the password printed beside the key.
      const password = /log in as demo@parley\.local with the password (\S+) \(shown this once\)/.exec(first.output())?.[1];
      expect(password).toBeDefined();
      const login = await fetch(`${first.url}/platform/login`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: 'parley_csrf=0123456789abcdef0123456789abcdef' },
        body: new URLSearchParams({ email: 'demo@parley.local', password: password!, _csrf: '0123456789abcdef0123456789abcdef' }),
      });
      expect(login.status).toBe(303);
      expect(login.headers.get('set-cookie')).toContain('parley_session=');
      await first.stop();

      const second = await startParleyServe(args, noSharedRedis);
      expect(second.output()).not.toContain('sk-parley-');
      expect(second.output()).not.toContain('password');
      // Same private Redis files: the key and its spending survived the restart.
      const after = await (await fetch(`${second.url}/user/balance`, { headers: { authorization: `Bearer ${key}` } })).json();
      expect(Number(after.balance_infos[0].total_balance)).toBeLessThan(10);
      await second.stop();
      expect(readFileSync(join(dir, 'data', 'redis', 'appendonlydir', 'appendonly.aof.manifest'), 'utf8')).toContain('appendonly');
    } finally {
      await upstream.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a port already taken with a one-line message, and leaves no private Redis running (parley serve, then parley engine)', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as AddressInfo).port;
    const dir = mkdtempSync(join(tmpdir(), 'parley-port-'));
    const config = routingFile(dir, { models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] });
    try {
      const refused = await runParleyFailing(['serve', '--host', '127.0.0.1', '--port', String(port), '--config', config, '--data-dir', join(dir, 'data')], { REDIS_URL: '' });
      const oneLine = `parley: cannot listen on 127.0.0.1:${port}: another process is listening there; choose another port`;
      expect(refused.code).toBe(1);
      expect(refused.stderr.trim()).toBe(oneLine);
      // The private Redis it had started is stopped: nothing answers on its socket.
      const socketAnswers = await new Promise<boolean>((resolve) => {
        const conn = connect(join(dir, 'data', 'redis', 'redis.sock'));
        conn.once('connect', () => resolve(true)).once('error', () => resolve(false));
        conn.unref();
      });
      expect(socketAnswers).toBe(false);
      // The local engine, the same.
      const engine = await runParleyFailing(['engine', '--port', String(port), '--data-dir', join(dir, 'data')]);
      expect(engine.code).toBe(1);
      expect(engine.stderr.trim()).toBe(oneLine);
    } finally {
      taken.close();
      try {
        execFileSync('pkill', ['-f', join(dir, 'data', 'redis')]);
      } catch {
        // none left, as it should be
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a bad option or a missing model file with one line, before starting anything', async () => {
    const refusals: [string[], Record<string, string>, string][] = [
      [['serve', '--port', 'abc'], {}, '--port (or PORT) must be a whole number from 0 to 65535, not "abc"'],
      [['serve'], { PORT: '70000' }, '--port (or PORT) must be a whole number from 0 to 65535, not "70000"'],
      [['engine', '--context-size', '2k'], {}, '--context-size must be a whole number from 1 to 16777216, not "2k"'],
      [['engine', '--parallel', '0'], {}, '--parallel must be a whole number from 1 to 256, not "0"'],
      [['engine', '--model', '/no/such/model.gguf'], {}, 'no model file at /no/such/model.gguf'],
    ];
    for (const [args, env, message] of refusals) {
      const refused = await runParleyFailing(args, env);
      expect(refused, args.join(' ')).toMatchObject({ code: 1, stdout: '' });
      expect(refused.stderr.trim()).toBe(`parley: ${message}`);
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
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the local engine a gateway starts', () => {
  /** The engine processes `parley serve` (pid) runs as its children. */
  const enginesOf = (pid: number): number[] => {
    let children = '';
    try {
      children = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(pid)], { encoding: 'utf8' });
    } catch {
      // ps exits 1 when the process has no children at all.
    }
    return children
      .split('\n')
      .filter((line) => / engine /.test(line))
      .map((line) => Number(line.trim().split(/\s+/)[0]));
  };
  const alive = (pid: number) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  const waitFor = async (check: () => boolean, ms: number) => {
    const deadline = Date.now() + ms;
    while (!check() && Date.now() < deadline) await sleep(100);
    return check();
  };

  it('is restarted when it crashes, stops with its gateway when the gateway is killed with -9, and is not restarted when told to stop', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'parley-engine-'));
    const config = routingFile(dir, {
      models: [{ id: 'tiny', contextWindow: 1024, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 1, output: 1 }, endpoints: [{ kind: 'parley-engine', local: { contextSize: 1024, parallel: 1 } }] }],
    });
    const args = ['--config', config, '--data-dir', join(dir, 'data')];
    const env = { REDIS_URL: '', PARLEY_KEY_SECRET: '' };

    try {
      await engineLifetimes(args, env, dir);
    } finally {
      // The gateway killed with -9 leaves its private Redis running (the next start reuses it); this test is the last to use it.
      try {
        execFileSync('pkill', ['-f', join(dir, 'data', 'redis')]);
      } catch {
        // already gone
      }
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  async function engineLifetimes(args: string[], env: Record<string, string>, dir: string): Promise<void> {
    const started: ParleyProcess[] = [];
    try {
      await checkEngineLifetimes(args, env, dir, started);
    } finally {
      // A failed check leaves nothing running behind it.
      await Promise.all(started.map((p) => p.stop('SIGKILL')));
    }
  }

  async function checkEngineLifetimes(args: string[], env: Record<string, string>, dir: string, started: ParleyProcess[]): Promise<void> {
    const first = await startParleyServe(args, env);
    started.push(first);
    const [engine] = enginesOf(first.child.pid!);
    expect(engine).toBeGreaterThan(0);
    process.kill(engine, 'SIGKILL');
    expect(await waitFor(() => enginesOf(first.child.pid!).some((p) => p !== engine), 30_000)).toBe(true);
    const [restarted] = enginesOf(first.child.pid!);
    await first.stop('SIGKILL');
    expect(await waitFor(() => !alive(restarted), 10_000)).toBe(true);

    // Ctrl-C reaches the engine as well as the gateway, and the gateway may take a while to close:
    // the engine, told to stop, is not started again meanwhile, and nothing is left running.
    const second = await startParleyServe(args, env);
    started.push(second);
    const [engine2] = enginesOf(second.child.pid!);
    process.kill(engine2, 'SIGINT');
    await sleep(1_500);
    expect(enginesOf(second.child.pid!)).toEqual([]);
    await second.stop('SIGINT');
    expect(alive(engine2)).toBe(false);
    expect(execFileSync('ps', ['-eo', 'args='], { encoding: 'utf8' }).split('\n').filter((line) => line.includes(join(dir, 'data')) && / engine /.test(line))).toEqual([]);
  }
});
