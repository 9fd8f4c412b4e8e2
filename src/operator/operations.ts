// What an operator can do to accounts, credit and keys: one implementation
// that both front ends call, the `parley` command (operator/commands.ts)
// and the admin HTTP API (gateway/admin-api.ts). Each input is a zod schema,
// which validates the call and is also the API's OpenAPI document; each
// change is appended to the audit stream with who made it and the figures
// before and after.
import { z } from 'zod';
import type { Redis } from 'ioredis';
import { addMember, createAccount, EmailTaken, isEmail, listAccounts, listMembers, resolveAccount, setAccountLimits, type Account } from '../accounts/accounts.js';
import { SERVICE_TIERS } from '../protocol/service-tier.js';
import { BUDGET_PERIODS, createApiKey, findApiKeyById, keySpend, listApiKeys, revokeApiKey, setKeyLimits, TooManyKeys, type ApiKeyRecord, type KeyLimits } from '../accounts/api-keys.js';
import { createCreditCode } from '../billing/credit-codes.js';
import { balanceSummary, changeCredit } from '../billing/credit-ledger.js';
import { formatMicros, isAmountText, MAX_BALANCE_UNITS, parseAmount } from '../billing/prices.js';
import { readUsageEvents, type UsageEvent, type UsageFilter } from '../billing/usage-events.js';
import { redisKeys } from '../redis/keys.js';

/** Who is acting: `cli` for the command, the admin token's name for the API. */
export interface Operator {
  redis: Redis;
  secret: string;
  actor: string;
}

/** A call that cannot be made as asked: the front ends show it as a 400/404 or as the command's error. */
export class OperationRefused extends Error {
  constructor(readonly status: 400 | 404 | 409, message: string) {
    super(message);
  }
}

const amount = z.string().refine(isAmountText, `an amount in the account currency: digits, up to six decimals ("5", "0.25"), at most ${MAX_BALANCE_UNITS}`);
/** An amount of credit moved: more than zero. */
const credit = amount.refine((text) => !isAmountText(text) || parseAmount(text) > 0, 'more than zero');
/** An email as an account's member logs in with it. */
const email = z.string().max(254).refine((text) => isEmail(text.toLowerCase()), 'an email address');
const keyLimitFields = {
  models: z.array(z.string().min(1)).min(1).nullable().optional().describe('the models the key may call; null for all'),
  budget: amount.nullable().optional().describe('the most the key may spend per budgetPeriod; null for no budget'),
  budgetPeriod: z.enum(BUDGET_PERIODS).optional().describe('day and month are UTC; total never renews (the default)'),
  expiresAt: z.iso.datetime().nullable().optional().describe('when the key stops working; null for never'),
  tier: z.enum(SERVICE_TIERS).nullable().optional().describe('the service tier its requests get unless they ask for another; only a priority key may ask for priority (null: default)'),
};

export const inputs = {
  accountCreate: z.object({
    email,
    name: z.string().min(1).max(200).optional(),
    password: z.string().min(8).max(200).optional().describe("the first member's password; without one, the account is claimed by signing up"),
    credit: credit.optional().describe('initial credit, granted'),
  }),
  accountLimits: z.object({
    requestsPerMinute: z.int().min(1).nullable().describe('null: the routing file default'),
    tokensPerMinute: z.int().min(1).nullable().describe('null: the routing file default'),
    concurrentRequests: z.int().min(1).nullable().optional().describe('requests in flight at once; null: the routing file default; left out: unchanged'),
  }),
  memberAdd: z.object({ email, password: z.string().min(10).max(200).describe("the member's platform password") }),
  creditChange: z.object({ kind: z.enum(['grant', 'deduct']), amount: credit, note: z.string().min(1).max(500).describe('why, for the ledger') }),
  keyCreate: z.object({ name: z.string().min(1).max(200), ...keyLimitFields }),
  keyLimits: z.object(keyLimitFields),
  creditCodes: z.object({ amount: credit, count: z.int().min(1).max(1000).default(1) }),
} as const;

function parse<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new OperationRefused(400, `${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  return parsed.data;
}

async function audit(op: Operator, action: string, target: string, before: unknown, after: unknown): Promise<void> {
  await op.redis.xadd(redisKeys.audit, '*', 'actor', op.actor, 'action', action, 'target', target, 'before', JSON.stringify(before ?? null), 'after', JSON.stringify(after ?? null));
}

async function accountNamed(op: Operator, idOrEmail: string): Promise<Account> {
  const found = await resolveAccount(op.redis, idOrEmail);
  if (!found) throw new OperationRefused(404, `no account ${idOrEmail}`);
  return found;
}

const money = (micros: number) => formatMicros(micros, 6);

async function accountView(op: Operator, a: Account) {
  const b = await balanceSummary(op.redis, a.id);
  return {
    id: a.id, email: a.email, name: a.name, created: new Date(a.created).toISOString(),
    balance: money(b.total), held: money(b.held), available: money(b.available),
    requestsPerMinute: a.requestsPerMinute ?? null, tokensPerMinute: a.tokensPerMinute ?? null, concurrentRequests: a.concurrentRequests ?? null,
  };
}

async function keyView(op: Operator, k: ApiKeyRecord) {
  const spend = await keySpend(op.redis, k);
  return {
    id: k.id, account: k.account, name: k.name, suffix: k.suffix, created: new Date(k.created).toISOString(),
    lastUsed: k.lastUsed ? new Date(k.lastUsed).toISOString() : null, revoked: k.revoked, models: k.models,
    budget: k.budget ? money(k.budget.limit) : null, budgetPeriod: k.budget?.period ?? null, spentThisPeriod: k.budget ? money(spend.spent) : null,
    expiresAt: k.expiresAt !== null ? new Date(k.expiresAt).toISOString() : null, tier: k.tier,
  };
}

/** The limits a call asks for: absent where not given, null where cleared; a period alone keeps the key's budget amount. */
function limitsOf(input: z.infer<typeof inputs.keyLimits>, current?: ApiKeyRecord): KeyLimits {
  const limits: KeyLimits = {};
  if (input.models !== undefined) limits.models = input.models;
  if (input.expiresAt !== undefined) limits.expiresAt = input.expiresAt === null ? null : Date.parse(input.expiresAt);
  // A key that would be born expired is a mistake; revoking is how a key is stopped now.
  if (limits.expiresAt != null && limits.expiresAt <= Date.now()) throw new OperationRefused(400, 'expiresAt: a time in the future (revoke a key to stop it now)');
  if (input.tier !== undefined) limits.tier = input.tier;
  if (input.budget === null) limits.budget = null;
  else if (input.budget !== undefined || input.budgetPeriod !== undefined) {
    const limit = input.budget !== undefined ? parseAmount(input.budget) : current?.budget?.limit;
    if (limit === undefined) throw new OperationRefused(400, 'budgetPeriod needs a budget (the key has none)');
    limits.budget = { limit, period: input.budgetPeriod ?? current?.budget?.period ?? 'total' };
  }
  return limits;
}

/** Every account's events: account by account, each in time order. */
async function* everyAccountsUsage(redis: Redis, filter: UsageFilter): AsyncGenerator<UsageEvent> {
  for (const account of await listAccounts(redis)) yield* readUsageEvents(redis, account.id, filter);
}

export const operations = {
  async listAccounts(op: Operator) {
    return Promise.all((await listAccounts(op.redis)).map((a) => accountView(op, a)));
  },

  async getAccount(op: Operator, idOrEmail: string) {
    return accountView(op, await accountNamed(op, idOrEmail));
  },

  /** An account, its first member and its first key (shown once). */
  async createAccount(op: Operator, body: unknown) {
    const input = parse(inputs.accountCreate, body);
    let created: Account;
    try {
      created = await createAccount(op.redis, { email: input.email, name: input.name, password: input.password });
    } catch (err) {
      if (err instanceof EmailTaken) throw new OperationRefused(409, err.message);
      throw err;
    }
    if (input.credit) await changeCredit(op.redis, created.id, 'grant', parseAmount(input.credit), 'initial credit');
    const { key, record } = await createApiKey(op.redis, op.secret, created.id, 'default');
    const account = await accountView(op, created);
    await audit(op, 'account.create', created.id, null, account);
    return { account, apiKey: key, key: await keyView(op, record) };
  },

  async setAccountLimits(op: Operator, idOrEmail: string, body: unknown) {
    const input = parse(inputs.accountLimits, body);
    const a = await accountNamed(op, idOrEmail);
    const before = { requestsPerMinute: a.requestsPerMinute ?? null, tokensPerMinute: a.tokensPerMinute ?? null, concurrentRequests: a.concurrentRequests ?? null };
    await setAccountLimits(op.redis, a.id, input);
    await audit(op, 'account.limits', a.id, before, input);
    return accountView(op, await accountNamed(op, a.id));
  },

  async listMembers(op: Operator, idOrEmail: string) {
    const a = await accountNamed(op, idOrEmail);
    return { account: a.id, members: await listMembers(op.redis, a) };
  },

  /** A member who logs in to the account's platform pages. */
  async addMember(op: Operator, idOrEmail: string, body: unknown) {
    const input = parse(inputs.memberAdd, body);
    const a = await accountNamed(op, idOrEmail);
    const before = await listMembers(op.redis, a);
    try {
      await addMember(op.redis, a.id, input);
    } catch (err) {
      if (err instanceof EmailTaken) throw new OperationRefused(409, err.message);
      throw err;
    }
    const after = await listMembers(op.redis, a);
    await audit(op, 'member.add', a.id, { members: before }, { members: after });
    return { account: a.id, members: after };
  },

  /** A grant or a deduction; with an idempotency key, applied once however often it is sent. */
  async changeCredit(op: Operator, idOrEmail: string, body: unknown, idempotencyKey?: string) {
    const input = parse(inputs.creditChange, body);
    if (idempotencyKey !== undefined && !/^[\x21-\x7e]{1,200}$/.test(idempotencyKey)) throw new OperationRefused(400, 'Idempotency-Key: 1 to 200 printable characters');
    const a = await accountNamed(op, idOrEmail);
    const before = await balanceSummary(op.redis, a.id);
    const changed = await changeCredit(op.redis, a.id, input.kind, parseAmount(input.amount), input.note, idempotencyKey ? `idem:${idempotencyKey}` : '');
    if (changed.kind === 'no_account') throw new OperationRefused(404, `no account ${idOrEmail}`);
    if (changed.kind === 'over_maximum') throw new OperationRefused(400, `amount: the balance (${money(changed.balance)}) may be at most ${MAX_BALANCE_UNITS}`);
    if (changed.kind === 'applied_before') return { account: a.id, balance: money(changed.balance), applied: false };
    await audit(op, `credit.${input.kind}`, a.id, { balance: money(before.total) }, { balance: money(changed.balance), amount: money(changed.amount), note: input.note });
    return { account: a.id, balance: money(changed.balance), applied: true };
  },

  async listKeys(op: Operator, idOrEmail: string) {
    const a = await accountNamed(op, idOrEmail);
    return Promise.all((await listApiKeys(op.redis, a.id)).map((k) => keyView(op, k)));
  },

  /** A key with its limits; the key itself is in the answer this once. */
  async createKey(op: Operator, idOrEmail: string, body: unknown) {
    const input = parse(inputs.keyCreate, body);
    const a = await accountNamed(op, idOrEmail);
    const { key, record } = await createApiKey(op.redis, op.secret, a.id, input.name, limitsOf(input)).catch((err: unknown) => {
      throw err instanceof TooManyKeys ? new OperationRefused(409, err.message) : err;
    });
    const view = await keyView(op, record);
    await audit(op, 'key.create', record.id, null, view);
    return { apiKey: key, key: view };
  },

  /** Changes a key's limits; with `account`, only a key of that account. */
  async setKeyLimits(op: Operator, keyId: string, body: unknown, account?: string) {
    const input = parse(inputs.keyLimits, body);
    const current = await findApiKeyById(op.redis, keyId);
    if (!current || (account && current.account !== account)) throw new OperationRefused(404, `no key ${keyId}`);
    const record = await setKeyLimits(op.redis, keyId, limitsOf(input, current));
    if (!record) throw new OperationRefused(404, `no key ${keyId}`);
    const [before, after] = [await keyView(op, current), await keyView(op, record)];
    await audit(op, 'key.limits', keyId, before, after);
    return after;
  },

  /** Revokes a key; with `account`, only a key of that account. */
  async revokeKey(op: Operator, keyId: string, account?: string) {
    const current = await findApiKeyById(op.redis, keyId);
    if (!current || (account && current.account !== account) || !(await revokeApiKey(op.redis, keyId))) throw new OperationRefused(404, `no key ${keyId}`);
    await audit(op, 'key.revoke', keyId, { revoked: current.revoked }, { revoked: true });
    return { id: keyId, revoked: true };
  },

  async createCreditCodes(op: Operator, body: unknown) {
    const input = parse(inputs.creditCodes, body);
    const codes: string[] = [];
    for (let i = 0; i < input.count; i++) codes.push(await createCreditCode(op.redis, parseAmount(input.amount)));
    // The codes themselves are credit: the audit keeps how many and their worth, never the codes.
    await audit(op, 'credit-codes.create', '-', null, { amount: input.amount, count: input.count });
    return { amount: input.amount, codes };
  },

  /** Usage events, of one account (an id or a member email) or of all, between two UTC days (YYYY-MM-DD, both included). */
  async usageEvents(op: Operator, query: { account?: string; since?: string; until?: string }): Promise<AsyncIterable<UsageEvent>> {
    const day = (name: 'since' | 'until') => {
      const text = query[name];
      if (text === undefined) return undefined;
      const ms = Date.parse(`${text}T00:00:00Z`);
      if (!/^\d{4}-\d{2}-\d{2}$/.test(text) || Number.isNaN(ms)) throw new OperationRefused(400, `${name}: "${text}" is not a date (YYYY-MM-DD)`);
      return name === 'until' ? ms + 86_400_000 - 1 : ms;
    };
    const filter = { since: day('since'), until: day('until') };
    return query.account ? readUsageEvents(op.redis, (await accountNamed(op, query.account)).id, filter) : everyAccountsUsage(op.redis, filter);
  },

  /** The newest audit entries first. */
  async listAudit(op: Operator, count = 100) {
    const entries = (await op.redis.xrevrange(redisKeys.audit, '+', '-', 'COUNT', Math.max(1, Math.min(count, 10_000)))) as [string, string[]][];
    return entries.map(([id, fields]) => {
      const f = Object.fromEntries(fields.reduce<[string, string][]>((pairs, v, i) => (i % 2 ? pairs : [...pairs, [v, fields[i + 1]]]), []));
      return { id, at: new Date(Number(id.split('-')[0])).toISOString(), actor: f.actor, action: f.action, target: f.target, before: JSON.parse(f.before), after: JSON.parse(f.after) };
    });
  },
};
