// Sign up, log in, log out.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createAccount, EmailTaken, isEmail } from '../accounts/accounts.js';
import { verifyPassword } from '../accounts/passwords.js';
import { redisKeys } from '../redis/keys.js';
import type { PlatformServices } from './services.js';
import { html, type Html } from './html.js';
import { page, redirect, sendPage } from './layout.js';
import { allowAttempt, csrfToken, endSession, startSession, type Session } from './sessions.js';

const COMMON_PASSWORDS = new Set(['password123', '1234567890', 'qwertyuiop', 'iloveyou12', 'password12', 'letmein123']);

/** Why a password is too weak, or undefined when it is acceptable. */
export function passwordProblem(password: string, email: string): string | undefined {
  if (password.length < 10) return 'Choose a password of at least 10 characters.';
  if (password.length > 200) return 'Choose a password of at most 200 characters.';
  if (new Set(password).size < 5 || COMMON_PASSWORDS.has(password.toLowerCase())) return 'That password is too easy to guess; mix more different characters.';
  if (password.toLowerCase().includes(email.split('@')[0].toLowerCase()) && email.split('@')[0].length >= 4) return 'Your password must not contain your email name.';
  return undefined;
}

/** What a page says above its form: a refusal, or the confirmation of what was just done. */
export type Notice = { kind: 'error' | 'success'; text: string };

function authForm(kind: 'login' | 'signup', csrf: string, notice?: Notice, email = '', signupOpen = true): Html {
  const signup = kind === 'signup';
  return html`<section class="auth card">
    <h1>${signup ? 'Create your account' : 'Log in'}</h1>
    ${notice ? html`<p class="notice ${notice.kind}" role="${notice.kind === 'error' ? 'alert' : 'status'}">${notice.text}</p>` : ''}
    <form method="post" action="/platform/${kind}">
      <input type="hidden" name="_csrf" value="${csrf}">
      <label for="email">Email</label><input id="email" name="email" type="email" autocomplete="email" required value="${email}">
      <label for="password">Password</label>
      <input id="password" name="password" type="password" autocomplete="${signup ? 'new-password' : 'current-password'}" required${signup ? html` minlength="10"` : ''}>
      ${signup ? html`<p class="muted">At least 10 characters.</p>` : ''}
      <p><button type="submit">${signup ? 'Sign up' : 'Log in'}</button></p>
    </form>
    <p class="muted">${signup ? html`Have an account? <a href="/platform/login">Log in</a>` : signupOpen ? html`New here? <a href="/platform/signup">Create an account</a>` : 'Ask your operator for an account.'}</p>
  </section>`;
}

export function showAuth(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, kind: 'login' | 'signup', status = 200, error?: string, email?: string, notice?: Notice): void {
  const csrf = csrfToken(req, res);
  const signupOpen = ctx.routing().platform.signup;
  if (kind === 'signup' && !signupOpen) return showAuth(req, res, ctx, 'login', 403, 'Sign-up is closed here; ask your operator for an account.');
  const shown = error ? { kind: 'error' as const, text: error } : notice;
  sendPage(res, status, page({ title: kind === 'signup' ? 'Sign up' : 'Log in', csrf }, authForm(kind, csrf, shown, email, signupOpen)));
}

export async function signUp(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, form: URLSearchParams): Promise<void> {
  if (!ctx.routing().platform.signup) return showAuth(req, res, ctx, 'login', 403, 'Sign-up is closed here; ask your operator for an account.');
  const email = (form.get('email') ?? '').trim().toLowerCase();
  const password = form.get('password') ?? '';
  if (!isEmail(email)) return showAuth(req, res, ctx, 'signup', 400, 'Enter a valid email address.', email);
  const weak = passwordProblem(password, email);
  if (weak) return showAuth(req, res, ctx, 'signup', 400, weak, email);
  if (!(await allowAttempt(ctx.redis, req, 'signup', ctx.routing().platform.trustedProxies))) return showAuth(req, res, ctx, 'signup', 429, 'Too many accounts made from here lately. Wait an hour and try again.', email);
  try {
    const account = await createAccount(ctx.redis, { email, password });
    await startSession(ctx.redis, req, res, account.id, email);
  } catch (err) {
    if (err instanceof EmailTaken) return showAuth(req, res, ctx, 'signup', 409, 'An account with this email already exists. Log in instead.', email);
    throw err;
  }
  redirect(res, '/platform');
}

export async function logIn(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, form: URLSearchParams): Promise<void> {
  const email = (form.get('email') ?? '').trim().toLowerCase();
  if (!(await allowAttempt(ctx.redis, req, 'login', ctx.routing().platform.trustedProxies))) return showAuth(req, res, ctx, 'login', 429, 'Too many attempts. Wait 15 minutes and try again.', email);
  const member = await ctx.redis.hgetall(redisKeys.member(email));
  const ok = member.password !== undefined && (await verifyPassword(form.get('password') ?? '', member.password));
  if (!ok) return showAuth(req, res, ctx, 'login', 401, 'Wrong email or password.', email);
  await startSession(ctx.redis, req, res, member.account, email);
  redirect(res, '/platform');
}

export async function logOut(req: IncomingMessage, res: ServerResponse, ctx: PlatformServices, session: Session): Promise<void> {
  await endSession(ctx.redis, req, res, session);
  redirect(res, '/platform/login?signed-out');
}
