// The operator's commands, run against the same Redis as the gateway:
// REDIS_URL, or the private server in the data folder (started for the
// command if the gateway is not running).
import { createWriteStream } from 'node:fs';
import { parseArgs } from 'node:util';
import type { Redis } from 'ioredis';
import { createAccount, listAccounts, resolveAccount, setAccountLimits, type Account } from '../accounts/accounts.js';
import { BUDGET_PERIODS, createApiKey, findApiKeyById, keySpend, listApiKeys, maskedKey, revokeApiKey, setKeyLimits, type ApiKeyRecord, type BudgetPeriod, type KeyLimits } from '../accounts/api-keys.js';
import { resolveKeySecret } from '../accounts/server-secret.js';
import { createCreditCode } from '../billing/credit-codes.js';
import { balanceSummary, changeCredit, type CreditChange } from '../billing/credit-ledger.js';
import { formatMicros, parseAmount } from '../billing/prices.js';
import { readAllUsageEvents, readUsageEvents, usageCsv } from '../billing/usage-events.js';
import { ConfigError } from '../config.js';
import { connectRedis, sharedRedisFromEnv } from '../redis/connection.js';
import { checkKeyLayout, migrateKeyLayout } from '../redis/key-layout.js';
import { startPrivateRedis } from '../redis/private-server.js';

export const OPERATOR_USAGE = `
  accounts create --email E [--name N] [--password P] [--credit 25]
                              make an account and print its first API key
  accounts list               every account with its balance
  accounts limits --account A [--rpm N] [--tpm N]   set (or, without both, clear) its rate limits
  credit grant  --account A --amount 5 --note TEXT
  credit deduct --account A --amount 5 --note TEXT
  keys create --account A --name N [--models m1,m2] [--budget 5] [--budget-period day|month|total] [--expires 2026-12-31T00:00:00Z]
                              print a new key (shown this once), limited to those models, that spend, until then
  keys limits KEY_ID [--models ...] [--budget ...] [--budget-period ...] [--expires ...]   change a key's limits (an empty value clears one)
  keys list --account A       each key with its limits and what it spent in its budget's period
  keys revoke KEY_ID
  credit-codes create --amount 5 [--count N]   codes a team redeems on the platform's top-up page
  migrate                     move data written by an earlier Parley to the current key layout (safe to rerun)
  usage export [--account A] [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--out FILE.csv]
               (A is an account id or a member's email; all take --data-dir DIR)
`;

interface Operator {
  redis: Redis;
  secret: string;
}

async function account(op: Operator, idOrEmail: string | undefined): Promise<Account> {
  if (!idOrEmail) throw new ConfigError('--account is required (an account id or a member email)');
  const found = await resolveAccount(op.redis, idOrEmail);
  if (!found) throw new ConfigError(`no account ${idOrEmail}`);
  return found;
}

function day(text: string | undefined, endOfDay: boolean): number | undefined {
  if (text === undefined) return undefined;
  const ms = Date.parse(`${text}T00:00:00Z`);
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text) || Number.isNaN(ms)) throw new ConfigError(`"${text}" is not a date (YYYY-MM-DD)`);
  return endOfDay ? ms + 86_400_000 - 1 : ms;
}

const OPTIONS = {
  email: { type: 'string' }, name: { type: 'string' }, password: { type: 'string' }, credit: { type: 'string' },
  account: { type: 'string' }, amount: { type: 'string' }, note: { type: 'string' }, rpm: { type: 'string' }, tpm: { type: 'string' },
  since: { type: 'string' }, count: { type: 'string' }, until: { type: 'string' }, out: { type: 'string' }, 'data-dir': { type: 'string' },
  models: { type: 'string' }, expires: { type: 'string' }, budget: { type: 'string' }, 'budget-period': { type: 'string' },
} as const;

/** A key's limits from --models, --expires, --budget and --budget-period: absent where not given, null where given empty (cleared). */
function keyLimits(v: Values, current?: ApiKeyRecord): KeyLimits {
  const limits: KeyLimits = {};
  if (v.models !== undefined) {
    const models = v.models.split(',').map((m) => m.trim()).filter(Boolean);
    limits.models = models.length > 0 ? models : null;
  }
  if (v.expires !== undefined) {
    const at = Date.parse(v.expires);
    if (v.expires !== '' && (Number.isNaN(at) || !/^\d{4}-\d{2}-\d{2}T/.test(v.expires))) throw new ConfigError(`--expires "${v.expires}" is not a time (2026-12-31T00:00:00Z)`);
    limits.expiresAt = v.expires === '' ? null : at;
  }
  const period = v['budget-period'];
  if (period !== undefined && !(BUDGET_PERIODS as readonly string[]).includes(period)) throw new ConfigError(`--budget-period is one of ${BUDGET_PERIODS.join(', ')}`);
  if (v.budget === '') limits.budget = null;
  else if (v.budget !== undefined || period !== undefined) {
    const limit = v.budget !== undefined ? parseAmount(v.budget) : current?.budget?.limit;
    if (limit === undefined) throw new ConfigError('--budget-period needs a --budget (the key has none)');
    limits.budget = { limit, period: (period ?? current?.budget?.period ?? 'total') as BudgetPeriod };
  }
  return limits;
}

const describeLimits = (k: ApiKeyRecord) => [
  k.models ? k.models.join(',') : 'any model',
  k.expiresAt ? `until ${new Date(k.expiresAt).toISOString()}` : 'no expiry',
  k.budget ? `budget ${formatMicros(k.budget.limit)} per ${k.budget.period}` : 'no budget',
];

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

const ACTIONS: Record<string, (op: Operator, v: Values, positionals: string[]) => Promise<void>> = {
  async migrate(op) {
    const moved = await migrateKeyLayout(op.redis);
    console.log(`migrated: ${moved.movedKeys} account keys, ${moved.ledgerEntries} ledger entries, ${moved.redeemedCodes} redeemed codes`);
  },
  async 'accounts create'(op, v) {
    if (!v.email) throw new ConfigError('--email is required');
    const created = await createAccount(op.redis, { email: v.email, name: v.name, password: v.password });
    if (v.credit) await changeCredit(op.redis, created.id, 'grant', parseAmount(v.credit), 'initial credit');
    const { key } = await createApiKey(op.redis, op.secret, created.id, 'default');
    console.log(`account ${created.id} (${created.email}), credit ${v.credit ?? '0'}`);
    console.log(`API key (shown once): ${key}`);
  },
  async 'accounts list'(op) {
    console.log(['id', 'email', 'name', 'balance', 'held', 'available'].join('\t'));
    for (const a of await listAccounts(op.redis)) {
      const b = await balanceSummary(op.redis, a.id);
      console.log([a.id, a.email, a.name, formatMicros(b.total), formatMicros(b.held), formatMicros(b.available)].join('\t'));
    }
  },
  async 'accounts limits'(op, v) {
    const a = await account(op, v.account);
    const limit = (text: string | undefined) => (text === undefined ? null : Number.parseInt(text, 10));
    await setAccountLimits(op.redis, a.id, { requestsPerMinute: limit(v.rpm), tokensPerMinute: limit(v.tpm) });
    console.log(`${a.id}: requests/min ${v.rpm ?? 'default'}, tokens/min ${v.tpm ?? 'default'} (replicas apply it within a minute)`);
  },
  'credit grant': (op, v) => adjustCredit(op, v, 'grant'),
  'credit deduct': (op, v) => adjustCredit(op, v, 'deduct'),
  async 'keys create'(op, v) {
    const a = await account(op, v.account);
    const { key, record } = await createApiKey(op.redis, op.secret, a.id, v.name ?? 'unnamed', keyLimits(v));
    console.log(`key ${record.id} for ${a.id}: ${describeLimits(record).join(', ')}`);
    console.log(`API key (shown once): ${key}`);
  },
  async 'keys limits'(op, v, positionals) {
    const id = positionals[0];
    if (!id) throw new ConfigError('keys limits needs a key id (see keys list)');
    const record = await setKeyLimits(op.redis, id, keyLimits(v, await findApiKeyById(op.redis, id)));
    if (!record) throw new ConfigError(`no key ${id}`);
    console.log(`key ${id}: ${describeLimits(record).join(', ')}`);
  },
  async 'keys list'(op, v) {
    const a = await account(op, v.account);
    console.log(['id', 'name', 'key', 'created', 'last used', 'revoked', 'models', 'expiry', 'budget', 'spent this period'].join('\t'));
    for (const k of await listApiKeys(op.redis, a.id)) {
      const when = (ms: number | null) => (ms ? new Date(ms).toISOString() : '-');
      const spent = k.budget ? formatMicros((await keySpend(op.redis, k)).spent) : '-';
      console.log([k.id, k.name, maskedKey(k.suffix), when(k.created), when(k.lastUsed), k.revoked ? 'yes' : 'no', ...describeLimits(k), spent].join('\t'));
    }
  },
  async 'keys revoke'(op, _v, positionals) {
    const id = positionals[0];
    if (!id) throw new ConfigError('keys revoke needs a key id (see keys list)');
    if (!(await revokeApiKey(op.redis, id))) throw new ConfigError(`no key ${id}`);
    console.log(`revoked ${id}`);
  },
  async 'credit-codes create'(op, v) {
    if (!v.amount) throw new ConfigError('--amount is required');
    const amount = parseAmount(v.amount);
    const count = v.count ? Number.parseInt(v.count, 10) : 1;
    if (!(count >= 1 && count <= 1000)) throw new ConfigError('--count is 1 to 1000');
    for (let i = 0; i < count; i++) console.log(await createCreditCode(op.redis, amount));
  },
  async 'usage export'(op, v) {
    const filter = { since: day(v.since, false), until: day(v.until, true) };
    const events = v.account ? readUsageEvents(op.redis, (await account(op, v.account)).id, filter) : readAllUsageEvents(op.redis, filter);
    const out = v.out ? createWriteStream(v.out) : process.stdout;
    for await (const line of usageCsv(events)) out.write(line);
    if (out !== process.stdout) await new Promise((r) => (out as ReturnType<typeof createWriteStream>).end(r));
  },
};

async function adjustCredit(op: Operator, v: Values, kind: CreditChange): Promise<void> {
  const a = await account(op, v.account);
  if (!v.amount) throw new ConfigError('--amount is required');
  if (!v.note) throw new ConfigError('--note is required: say why, for the ledger');
  const changed = await changeCredit(op.redis, a.id, kind, parseAmount(v.amount), v.note);
  console.log(`${a.id}: balance ${formatMicros(changed.kind === 'no_account' ? 0 : changed.balance)}`);
}

export function isOperatorCommand(group: string): boolean {
  return Object.keys(ACTIONS).some((name) => name === group || name.startsWith(`${group} `));
}

export async function runOperatorCommand(group: string, argv: string[], dataDir: (flag?: string) => string): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true });
  const [verb, ...rest] = positionals;
  const action = ACTIONS[`${group} ${verb}`] ?? ACTIONS[group];
  if (!action) throw new ConfigError(`unknown command: parley ${group} ${verb ?? ''}\n${OPERATOR_USAGE}`);
  const dir = dataDir(values['data-dir']);
  const shared = sharedRedisFromEnv();
  const secret = resolveKeySecret(dir, shared !== undefined);
  const privateRedis = shared ? undefined : await startPrivateRedis(dir);
  const redis = await connectRedis(shared ?? privateRedis!.target, 'parley-operator');
  try {
    if (action !== ACTIONS.migrate) await checkKeyLayout(redis);
    await action({ redis, secret }, values, rest);
  } catch (err) {
    // An operator needs the reason, not a stack trace.
    throw new ConfigError((err as Error).message);
  } finally {
    redis.disconnect();
    await privateRedis?.stop();
  }
}
