// The operator's commands, run against the same Redis as the gateway (the
// REDIS_* variables, or the private server in the data folder, started for
// the command if the gateway is not running). Each change is one of the
// operations the admin API calls too (operator/operations.ts).
import { createWriteStream } from 'node:fs';
import { parseArgs } from 'node:util';
import { maskedKey } from '../accounts/api-keys.js';
import { resolveKeySecret } from '../accounts/server-secret.js';
import { usageCsv } from '../billing/usage-events.js';
import { ConfigError } from '../config-error.js';
import { connectRedis } from '../redis/connection.js';
import { sharedRedisFromEnv } from '../redis/shared-redis.js';
import { checkKeyLayout, migrateKeyLayout } from '../redis/key-layout.js';
import { startPrivateRedis } from '../redis/private-server.js';
import { operations, type Operator } from './operations.js';

export const OPERATOR_USAGE = `
  accounts create --email E [--name N] [--password P] [--credit 25]
                              make an account and print its first API key
  accounts list               every account with its balance
  accounts limits --account A [--rpm N] [--tpm N] [--concurrent N]   set its rate limits (one left out goes back to the default)
  members add --account A --email E --password P   another member, who logs in to the platform
  members list --account A
  credit grant  --account A --amount 5 --note TEXT
  credit deduct --account A --amount 5 --note TEXT
  keys create --account A --name N [--models m1,m2] [--budget 5] [--budget-period day|month|total] [--expires 2026-12-31T00:00:00Z] [--tier default|flex|priority]
                              print a new key (shown this once), limited to those models, that spend, until then, served at that tier
  keys limits KEY_ID [--models ...] [--budget ...] [--budget-period ...] [--expires ...] [--tier ...]   change a key's limits (an empty value clears one)
  keys list --account A       each key with its limits and what it spent in its budget's period
  keys revoke KEY_ID
  credit-codes create --amount 5 [--count N]   codes a team redeems on the platform's top-up page
  migrate                     move data written by an earlier Parley to the current key layout (safe to rerun)
  audit list [--count N]      the newest operator actions (CLI and admin API): who, what, before and after
  usage export [--account A] [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--out FILE.csv]
               (A is an account id or a member's email; all take --data-dir DIR)
`;

/** The --account flag: an account id or a member email, which the operations resolve. */
function accountFlag(v: { account?: string }): string {
  if (!v.account) throw new ConfigError('--account is required (an account id or a member email)');
  return v.account;
}

const OPTIONS = {
  email: { type: 'string' }, name: { type: 'string' }, password: { type: 'string' }, credit: { type: 'string' },
  account: { type: 'string' }, amount: { type: 'string' }, note: { type: 'string' }, rpm: { type: 'string' }, tpm: { type: 'string' }, concurrent: { type: 'string' },
  since: { type: 'string' }, count: { type: 'string' }, until: { type: 'string' }, out: { type: 'string' }, 'data-dir': { type: 'string' },
  models: { type: 'string' }, expires: { type: 'string' }, budget: { type: 'string' }, 'budget-period': { type: 'string' }, tier: { type: 'string' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

/** The limits the flags ask for, as the operations take them: absent where not given, null where given empty. */
function keyLimits(v: Values) {
  const empty = (text: string) => (text === '' ? null : text);
  const models = v.models?.split(',').map((m) => m.trim()).filter(Boolean);
  return {
    ...(v.models !== undefined ? { models: models!.length > 0 ? models : null } : {}),
    ...(v.expires !== undefined ? { expiresAt: empty(v.expires) } : {}),
    ...(v.budget !== undefined ? { budget: empty(v.budget) } : {}),
    ...(v['budget-period'] !== undefined ? { budgetPeriod: v['budget-period'] } : {}),
    ...(v.tier !== undefined ? { tier: empty(v.tier) } : {}),
  };
}

type KeyView = Awaited<ReturnType<typeof operations.listKeys>>[number];

const describeLimits = (k: KeyView) => [
  k.models ? k.models.join(',') : 'any model',
  k.expiresAt ? `until ${k.expiresAt}` : 'no expiry',
  k.budget ? `budget ${k.budget} per ${k.budgetPeriod}` : 'no budget',
  `${k.tier} tier`,
];

const ACTIONS: Record<string, (op: Operator, v: Values, positionals: string[]) => Promise<void>> = {
  async migrate(op) {
    const moved = await migrateKeyLayout(op.redis);
    console.log(`migrated: ${moved.movedKeys} account keys, ${moved.ledgerEntries} ledger entries, ${moved.redeemedCodes} redeemed codes`);
  },
  async 'accounts create'(op, v) {
    if (!v.email) throw new ConfigError('--email is required');
    const { account, apiKey } = await operations.createAccount(op, { email: v.email, name: v.name, password: v.password, credit: v.credit });
    console.log(`account ${account.id} (${account.email}), credit ${v.credit ?? '0'}`);
    console.log(`API key (shown once): ${apiKey}`);
  },
  async 'accounts list'(op) {
    console.log(['id', 'email', 'name', 'balance', 'held', 'available'].join('\t'));
    for (const a of await operations.listAccounts(op)) {
      console.log([a.id, a.email, a.name, a.balance, a.held, a.available].join('\t'));
    }
  },
  async 'accounts limits'(op, v) {
    const limit = (text: string | undefined) => (text === undefined ? null : Number(text));
    const a = await operations.setAccountLimits(op, accountFlag(v), { requestsPerMinute: limit(v.rpm), tokensPerMinute: limit(v.tpm), concurrentRequests: limit(v.concurrent) });
    console.log(`${a.id}: requests/min ${a.requestsPerMinute ?? 'default'}, tokens/min ${a.tokensPerMinute ?? 'default'}, in flight ${a.concurrentRequests ?? 'default'} (replicas apply it within a minute)`);
  },
  async 'members add'(op, v) {
    if (!v.email || !v.password) throw new ConfigError('--email and --password are required');
    const { account, members } = await operations.addMember(op, accountFlag(v), { email: v.email, password: v.password });
    console.log(`${account}: members ${members.join(', ')}`);
  },
  async 'members list'(op, v) {
    for (const email of (await operations.listMembers(op, accountFlag(v))).members) console.log(email);
  },
  'credit grant': (op, v) => adjustCredit(op, v, 'grant'),
  'credit deduct': (op, v) => adjustCredit(op, v, 'deduct'),
  async 'keys create'(op, v) {
    const { apiKey, key } = await operations.createKey(op, accountFlag(v), { name: v.name ?? 'unnamed', ...keyLimits(v) });
    console.log(`key ${key.id} for ${key.account}: ${describeLimits(key).join(', ')}`);
    console.log(`API key (shown once): ${apiKey}`);
  },
  async 'keys limits'(op, v, positionals) {
    const id = positionals[0];
    if (!id) throw new ConfigError('keys limits needs a key id (see keys list)');
    const key = await operations.setKeyLimits(op, id, keyLimits(v));
    console.log(`key ${id}: ${describeLimits(key).join(', ')}`);
  },
  async 'keys list'(op, v) {
    const keys = await operations.listKeys(op, accountFlag(v));
    console.log(['id', 'name', 'key', 'created', 'last used', 'revoked', 'models', 'expiry', 'budget', 'tier', 'spent this period'].join('\t'));
    for (const k of keys) {
      const spent = k.spentThisPeriod ?? '-';
      console.log([k.id, k.name, maskedKey(k.suffix), k.created, k.lastUsed ?? '-', k.revoked ? 'yes' : 'no', ...describeLimits(k), spent].join('\t'));
    }
  },
  async 'keys revoke'(op, _v, positionals) {
    const id = positionals[0];
    if (!id) throw new ConfigError('keys revoke needs a key id (see keys list)');
    await operations.revokeKey(op, id);
    console.log(`revoked ${id}`);
  },
  async 'credit-codes create'(op, v) {
    if (!v.amount) throw new ConfigError('--amount is required');
    const count = v.count === undefined ? 1 : Number(v.count);
    for (const code of (await operations.createCreditCodes(op, { amount: v.amount, count })).codes) console.log(code);
  },
  async 'audit list'(op, v) {
    console.log(['time', 'actor', 'action', 'target', 'before', 'after'].join('\t'));
    for (const e of await operations.listAudit(op, v.count === undefined ? 100 : Number(v.count))) {
      console.log([e.at, e.actor, e.action, e.target, JSON.stringify(e.before), JSON.stringify(e.after)].join('\t'));
    }
  },
  async 'usage export'(op, v) {
    const events = await operations.usageEvents(op, { account: v.account, since: v.since, until: v.until });
    const out = v.out ? createWriteStream(v.out) : process.stdout;
    // A reader that has read enough (`| head`) closes the pipe: the export stops there, as other commands' do.
    let readerGone = false;
    if (out === process.stdout) {
      out.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code !== 'EPIPE') throw err;
        readerGone = true;
      });
    }
    for await (const line of usageCsv(events)) {
      if (readerGone) break;
      out.write(line);
    }
    if (out !== process.stdout) await new Promise((r) => (out as ReturnType<typeof createWriteStream>).end(r));
  },
};

async function adjustCredit(op: Operator, v: Values, kind: 'grant' | 'deduct'): Promise<void> {
  if (!v.amount) throw new ConfigError('--amount is required');
  if (!v.note) throw new ConfigError('--note is required: say why, for the ledger');
  const changed = await operations.changeCredit(op, accountFlag(v), { kind, amount: v.amount, note: v.note });
  console.log(`${changed.account}: balance ${changed.balance}`);
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
    await action({ redis, secret, actor: 'cli' }, values, rest);
  } catch (err) {
    // An operator needs the reason, not a stack trace.
    throw new ConfigError((err as Error).message);
  } finally {
    redis.disconnect();
    await privateRedis?.stop();
  }
}
