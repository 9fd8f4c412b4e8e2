// The platform's usage CSV is sent as its member's browser takes it: the
// account's usage events are read a page at a time while the client reads,
// not all at once into the replica's memory, and the download counts
// against the account's bytes in flight as a body does. Written as fast as
// they were read, a client that read nothing had every event of its account
// turned into CSV and kept in memory.
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount } from '../../src/accounts/accounts.js';
import { redisKeys } from '../../src/redis/keys.js';
import { modelEntry, startTestGateway, type TestGateway } from '../support/gateway.js';

const EVENTS = 60_000;
const PASSWORD = 'a long passphrase 42';
let gw: TestGateway;
let cookie: string;

beforeAll(async () => {
  gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] });
  const account = await createAccount(gw.redis.client, { email: 'csv@team.example', password: PASSWORD });
  // 60 pages of 1,000 events, each with a long end-user name: 40 MB of CSV.
  for (let i = 0; i < EVENTS; i += 5_000) {
    const pipeline = gw.redis.client.pipeline();
    for (let j = i; j < i + 5_000; j++) {
      pipeline.xadd(redisKeys.usageEvents(account.id), '*', 'request_id', `req_${j}`, 'account', account.id, 'key', 'key_1', 'model', 'm', 'endpoint', 'e', 'outcome', 'completed', 'reason', '', 'user', 'u'.repeat(500), 'prompt_tokens', '1', 'cached_tokens', '0', 'completion_tokens', '1', 'cost', '2', 'charged', '2');
    }
    await pipeline.exec();
  }
  const form = await fetch(`${gw.url}/platform/login`);
  const csrf = /parley_csrf=([^;]+)/.exec(form.headers.get('set-cookie') ?? '')![1];
  const logIn = await fetch(`${gw.url}/platform/login`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `parley_csrf=${csrf}` },
    body: new URLSearchParams({ _csrf: csrf, email: 'csv@team.example', password: PASSWORD }).toString(),
  });
  cookie = /parley_session=([^;]+)/.exec(logIn.headers.get('set-cookie') ?? '')![0];
}, 60_000);
afterAll(() => gw?.close());

const pagesRead = async () => Number(/^cmdstat_xrange:calls=(\d+)/m.exec(await gw.redis.client.info('commandstats'))?.[1] ?? 0);

describe("the platform's usage CSV", () => {
  it('reads the events only as fast as its client takes them', async () => {
    const before = await pagesRead();
    const url = new URL(gw.url);
    const client = connect(Number(url.port), url.hostname, () => client.write(`GET /platform/usage.csv HTTP/1.1\r\nHost: x\r\nCookie: ${cookie}\r\n\r\n`));
    client.on('error', () => {});
    client.pause();
    try {
      await sleep(1_500);
      // What the sockets hold on the way, a few MB, and no more: the rest waits for the client.
      expect(await pagesRead() - before).toBeLessThan(20);
    } finally {
      client.destroy();
    }
  });

  it('is whole when read', async () => {
    const csv = await (await fetch(`${gw.url}/platform/usage.csv`, { headers: { cookie } })).text();
    const lines = csv.trimEnd().split('\n');
    expect(lines).toHaveLength(EVENTS + 1);
    expect(lines[1]).toContain('req_0');
    expect(lines.at(-1)).toContain(`req_${EVENTS - 1}`);
  });
});
