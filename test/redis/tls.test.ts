// A Redis that requires TLS, as managed ones do: REDIS_URL=rediss://... with
// REDIS_CA_FILE naming the private CA that signed the server's certificate.
// The CA, the certificate and the server are made here by the test.
import { redisKeys } from '../../src/redis/keys.js';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { stringify } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startGateway } from '../../src/gateway/start.js';
import { completionBody, replyJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, TEST_KEY_SECRET } from '../support/gateway.js';
import { freePort, type TestRedis } from '../support/redis.js';

let dir: string;
let server: ChildProcess;
let url: string;
let upstream: FakeUpstream;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'parley-tls-'));
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '1', '-subj', '/CN=parley-test-ca');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.crt', '-days', '1', '-extfile', 'ext.cnf');
  const port = await freePort();
  server = spawn('redis-server', ['--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '--tls-cert-file', 'server.crt', '--tls-key-file', 'server.key',
    '--tls-ca-cert-file', 'ca.crt', '--tls-auth-clients', 'no', '--save', '', '--dir', dir], { cwd: dir, stdio: 'ignore' });
  url = `rediss://127.0.0.1:${port}`;
  for (let tries = 0; ; tries++) {
    const probe = new Redis(url, { tls: { ca: readFileSync(join(dir, 'ca.crt')) }, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      break;
    } catch (err) {
      if (tries > 100) throw err;
      await new Promise((r) => setTimeout(r, 50));
    } finally {
      probe.disconnect();
    }
  }
  upstream = await startFakeUpstream((_req, res) => replyJson(res, completionBody('over tls', { prompt_tokens: 3, completion_tokens: 1 })));
});

afterAll(async () => {
  server?.kill('SIGKILL');
  await upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

afterEach(() => {
  vi.unstubAllEnvs();
});

const startOnTls = () => {
  const configPath = join(dir, 'routing.yaml');
  writeFileSync(configPath, stringify({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])], gateway: { requestLog: false } }));
  return startGateway({ configPath, dataDir: join(dir, 'data'), host: '127.0.0.1', port: 0, redis: { kind: 'server', url }, keySecret: TEST_KEY_SECRET });
};

describe('a Redis that requires TLS', () => {
  it('is reached at rediss:// with the private CA named by REDIS_CA_FILE, and serves keys and credit', async () => {
    vi.stubEnv('REDIS_CA_FILE', join(dir, 'ca.crt'));
    const client = new Redis(url, { tls: { ca: readFileSync(join(dir, 'ca.crt')) } });
    const gateway = await startOnTls();
    try {
      const { key, account } = await makeAccount({ client } as TestRedis, 1);
      const reply = await new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key, maxRetries: 0 }).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
      expect(reply.choices[0].message.content).toBe('over tls');
      await expect.poll(async () => Number(await client.hget(redisKeys.account(account), 'granted'))).toBeLessThan(1_000_000);
    } finally {
      await gateway.close(0);
      client.disconnect();
    }
  });

  it('cannot be reached without that CA: no authority Node trusts signed its certificate, so Parley does not start', async () => {
    await expect(startOnTls()).rejects.toThrow();
  });
});
