// Anyone may sign up, with no key: each sign-up is an account kept in Redis
// and a password hashed. One client address may make CLIENT_ATTEMPTS.signup
// an hour; past that it is refused, and makes nothing. Behind proxies an
// operator trusts, the client is the address they forwarded; a client's own
// X-Forwarded-For is never believed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLIENT_ATTEMPTS } from '../../src/platform/sessions.js';
import { redisKeys } from '../../src/redis/keys.js';
import { modelEntry, startTestGateway, type TestGateway } from '../support/gateway.js';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] });
});
afterAll(() => gw?.close());

/** A platform form posted as a browser does: its CSRF cookie from the page, and the same token in the form. */
async function postForm(path: string, fields: Record<string, string>, headers: Record<string, string> = {}, on = gw): Promise<number> {
  const form = await fetch(`${on.url}${path}`);
  const csrf = /parley_csrf=([^;]+)/.exec(form.headers.get('set-cookie') ?? '')![1];
  const answer = await fetch(`${on.url}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `parley_csrf=${csrf}`, ...headers },
    body: new URLSearchParams({ _csrf: csrf, ...fields }).toString(),
  });
  return answer.status;
}

const PASSWORD = 'a long passphrase 42';
const signUp = (email: string, headers: Record<string, string> = {}, on = gw) => postForm('/platform/signup', { email, password: PASSWORD }, headers, on);

describe('sign-up', () => {
  it('makes at most CLIENT_ATTEMPTS.signup accounts an hour from one client address, and nothing past it', async () => {
    const { max } = CLIENT_ATTEMPTS.signup;
    for (let i = 0; i < max; i++) expect(await signUp(`member-${i}@team.example`)).toBe(303);
    expect(await signUp('one-more@team.example')).toBe(429);
    expect(await gw.redis.client.exists(redisKeys.member('one-more@team.example'))).toBe(0);
    // Logging in is counted apart: the members made can still log in.
    expect(await postForm('/platform/login', { email: 'member-0@team.example', password: PASSWORD })).toBe(303);
    // With no proxy trusted, a client that names another address in X-Forwarded-For is still itself.
    expect(await signUp('spoofed@team.example', { 'x-forwarded-for': '198.51.100.7' })).toBe(429);
  });

  it('counts each client behind a trusted proxy apart, by the address the proxy forwarded, not the one a client wrote', async () => {
    const behind = await startTestGateway({ platform: { trustedProxies: ['127.0.0.0/8'] }, models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] });
    try {
      const { max } = CLIENT_ATTEMPTS.signup;
      // The proxy appends the address it saw; the client wrote the entry before it.
      const from = (client: string, written = '10.9.9.9') => ({ 'x-forwarded-for': `${written}, ${client}` });
      for (let i = 0; i < max; i++) expect(await signUp(`a-${i}@team.example`, from('203.0.113.5', `192.0.2.${i}`), behind)).toBe(303);
      expect(await signUp('a-more@team.example', from('203.0.113.5', '192.0.2.200'), behind)).toBe(429);
      expect(await signUp('b-0@team.example', from('203.0.113.6'), behind)).toBe(303);
      expect(await behind.redis.client.exists(redisKeys.clientAttempts('signup', '203.0.113.5'), redisKeys.clientAttempts('signup', '203.0.113.6'))).toBe(2);
    } finally {
      await behind.close();
    }
  });
});
