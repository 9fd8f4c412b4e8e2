// Anyone may sign up, with no key: each sign-up is an account kept in Redis
// and a password hashed. One client address may make CLIENT_ATTEMPTS.signup
// an hour; past that it is refused, and makes nothing.
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
async function postForm(path: string, fields: Record<string, string>): Promise<number> {
  const form = await fetch(`${gw.url}${path}`);
  const csrf = /parley_csrf=([^;]+)/.exec(form.headers.get('set-cookie') ?? '')![1];
  const answer = await fetch(`${gw.url}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `parley_csrf=${csrf}` },
    body: new URLSearchParams({ _csrf: csrf, ...fields }).toString(),
  });
  return answer.status;
}

const PASSWORD = 'a long passphrase 42';
const signUp = (email: string) => postForm('/platform/signup', { email, password: PASSWORD });

describe('sign-up', () => {
  it('makes at most CLIENT_ATTEMPTS.signup accounts an hour from one client address, and nothing past it', async () => {
    const { max } = CLIENT_ATTEMPTS.signup;
    for (let i = 0; i < max; i++) expect(await signUp(`member-${i}@team.example`)).toBe(303);
    expect(await signUp('one-more@team.example')).toBe(429);
    expect(await gw.redis.client.exists(redisKeys.member('one-more@team.example'))).toBe(0);
    // Logging in is counted apart: the members made can still log in.
    expect(await postForm('/platform/login', { email: 'member-0@team.example', password: PASSWORD })).toBe(303);
  });
});
