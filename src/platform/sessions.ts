// Platform sessions and CSRF protection. The session id lives in an HttpOnly,
// SameSite=Lax cookie (Secure behind TLS); the session itself in Redis, so
// any replica serves it. Every form carries a CSRF token that must equal the
// visitor's `parley_csrf` cookie (double submit), which a page on another
// origin can neither read nor set.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { clientAddress } from './client-address.js';

const SESSION_COOKIE = 'parley_session';
const CSRF_COOKIE = 'parley_csrf';
const SESSION_TTL_S = 7 * 24 * 3600;

/**
 * What one client address may try, per window: log in 10 times in 15 minutes (guessing passwords); sign up 20
 * times an hour (each is an account kept in Redis and a password hashed, asked of anyone, with no key).
 */
export const CLIENT_ATTEMPTS = {
  login: { max: 10, windowS: 15 * 60 },
  signup: { max: 20, windowS: 3600 },
} as const;

export interface Session {
  id: string;
  account: string;
  email: string;
}

export function cookies(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    // A cookie of someone else's on this origin may hold any bytes: one that does not decode is not ours, and is skipped.
    try {
      out[part.slice(0, i).trim()] = decodeURIComponent(part.slice(i + 1).trim());
    } catch {
      continue;
    }
  }
  return out;
}

const isTls = (req: IncomingMessage) => (req.socket as { encrypted?: boolean }).encrypted === true || req.headers['x-forwarded-proto'] === 'https';

function cookie(req: IncomingMessage, name: string, value: string, maxAgeS: number): string {
  return `${name}=${encodeURIComponent(value)}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAgeS}${isTls(req) ? '; Secure' : ''}`;
}

function addCookie(res: ServerResponse, value: string): void {
  const existing = res.getHeader('set-cookie');
  res.setHeader('set-cookie', [...(Array.isArray(existing) ? existing : existing ? [String(existing)] : []), value]);
}

// A token issued while answering a request, so that a second page rendered for it reuses it.
const issued = new WeakMap<IncomingMessage, string>();

/** The visitor's CSRF token, set as a cookie on first sight; forms embed it. */
export function csrfToken(req: IncomingMessage, res: ServerResponse): string {
  const existing = issued.get(req) ?? cookies(req)[CSRF_COOKIE];
  if (existing && /^[\w-]{32,}$/.test(existing)) return existing;
  const token = randomBytes(24).toString('base64url');
  addCookie(res, cookie(req, CSRF_COOKIE, token, SESSION_TTL_S));
  issued.set(req, token);
  return token;
}

export function csrfValid(req: IncomingMessage, submitted: string | undefined): boolean {
  const expected = cookies(req)[CSRF_COOKIE];
  if (!expected || !submitted) return false;
  const a = Buffer.from(expected);
  const b = Buffer.from(submitted);
  return a.length === b.length && timingSafeEqual(a, b);
}

export async function startSession(redis: Redis, req: IncomingMessage, res: ServerResponse, account: string, email: string): Promise<void> {
  const id = randomBytes(32).toString('base64url');
  await redis.multi().hset(redisKeys.session(id), { account, email }).expire(redisKeys.session(id), SESSION_TTL_S).exec();
  addCookie(res, cookie(req, SESSION_COOKIE, id, SESSION_TTL_S));
}

export async function currentSession(redis: Redis, req: IncomingMessage): Promise<Session | undefined> {
  const id = cookies(req)[SESSION_COOKIE];
  if (!id || !/^[\w-]{20,}$/.test(id)) return undefined;
  const h = await redis.hgetall(redisKeys.session(id));
  return h.account ? { id, account: h.account, email: h.email } : undefined;
}

export async function endSession(redis: Redis, req: IncomingMessage, res: ServerResponse, session: Session): Promise<void> {
  await redis.del(redisKeys.session(session.id));
  addCookie(res, cookie(req, SESSION_COOKIE, '', 0));
}

/** Counts an attempt of this kind from this client; false once its window's attempts are spent. */
export async function allowAttempt(redis: Redis, req: IncomingMessage, kind: keyof typeof CLIENT_ATTEMPTS, trustedProxies: readonly string[]): Promise<boolean> {
  const { max, windowS } = CLIENT_ATTEMPTS[kind];
  const key = redisKeys.clientAttempts(kind, clientAddress(req, trustedProxies));
  const [[, count]] = (await redis.multi().incr(key).expire(key, windowS, 'NX').exec()) as [[null, number]];
  return count <= max;
}
