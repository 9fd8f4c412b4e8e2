// Claude Code and Codex, each its pinned and its newest release, on the
// quickstart as a new user runs it: `parley serve` on its defaults (the local
// engine on Parley's own model, a private Redis, the demo key), the agent given
// only the base URL, the key and the model. Three turns each, each answered by
// the engine and charged exactly.
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runParley, startParleyServe, type ParleyProcess } from '../support/parley-process.js';
import { agentBinaries, codexProviderConfig } from '../support/agents.js';

const run = promisify(execFile);
const MODEL = 'parley-tiny';
// config/quickstart.yaml's prices, in micro-units per token.
const PRICE = { miss: 0.5, hit: 0.05, output: 1.5 };

let dir: string;
let parley: ParleyProcess;
let key: string;
const noSharedRedis = { REDIS_URL: '', PARLEY_KEY_SECRET: '' };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'parley-quickstart-agents-'));
  parley = await startParleyServe(['--data-dir', join(dir, 'data')], noSharedRedis);
  key = /^\s+(sk-parley-\S+)$/m.exec(parley.output())![1];
}, 120_000);

afterAll(async () => {
  await parley?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface UsageRow {
  request_id: string;
  endpoint: string;
  outcome: string;
  api: string;
  prompt_tokens: string;
  cached_tokens: string;
  completion_tokens: string;
  charged: string;
}

async function usageRows(): Promise<UsageRow[]> {
  const [header, ...lines] = (await runParley(['usage', 'export', '--data-dir', join(dir, 'data')], noSharedRedis)).trim().split('\n');
  const names = header.split(',');
  return lines.map((line) => Object.fromEntries(csvFields(line).map((v, i) => [names[i], v])) as unknown as UsageRow);
}

/** One CSV line's fields: a quoted field may hold commas and doubled quotes (Claude Code's metadata in `user` does). */
const csvFields = (line: string) => [...line.matchAll(/(?:^|,)("(?:[^"]|"")*"|[^,]*)/g)].map(([, f]) => (f.startsWith('"') ? f.slice(1, -1).replaceAll('""', '"') : f));

const micros = (units: string) => Math.round(Number(units) * 1_000_000);
const balance = async () => {
  const body = await (await fetch(`${parley.url}/user/balance`, { headers: { authorization: `Bearer ${key}` } })).json();
  return micros(body.balance_infos[0].total_balance);
};

/** What a row's tokens cost at the quickstart's prices, rounded up to a micro-unit as Parley charges. */
const costOf = (r: UsageRow) => {
  const hit = Number(r.cached_tokens);
  return Math.ceil((Number(r.prompt_tokens) - hit) * PRICE.miss + hit * PRICE.hit + Number(r.completion_tokens) * PRICE.output - 1e-9);
};

/** Runs the three turns; resolves to each turn's seconds. */
async function threeTurns(turn: (n: number) => Promise<{ stdout: string }>): Promise<number[]> {
  const seconds: number[] = [];
  for (let n = 1; n <= 3; n++) {
    const started = performance.now();
    const { stdout } = await turn(n);
    seconds.push((performance.now() - started) / 1000);
    // The engine's own words (its model writes gibberish), printed as the agent's answer.
    expect(stdout.trim().length).toBeGreaterThan(0);
  }
  return seconds;
}

const PROMPTS = ['say hi', 'say it again', 'and once more'];

describe.each(agentBinaries())('$name on the quickstart, with only a URL, a key and a model', (agent) => {
  let home: string;
  beforeAll(() => {
    home = mkdtempSync(join(dir, 'home-'));
    // A user's project: the agents run where a repository is.
    execFileSync('git', ['init', '-q', home]);
  });

  it('answers three turns of one session, each from the local engine, each charged exactly', async () => {
    const before = { rows: (await usageRows()).length, balance: await balance() };
    const env = { PATH: process.env.PATH, HOME: home };
    const turn =
      agent.kind === 'claude'
        ? (n: number) => run(agent.bin, ['-p', ...(n > 1 ? ['--continue'] : []), PROMPTS[n - 1], '--model', MODEL], { cwd: home, timeout: 120_000, env: { ...env, ANTHROPIC_BASE_URL: parley.url, ANTHROPIC_API_KEY: key } })
        : (n: number) => {
            const running = run(agent.bin, ['exec', ...(n > 1 ? ['resume', '--last'] : []), PROMPTS[n - 1]], { cwd: home, timeout: 120_000, env: { ...env, CODEX_HOME: join(home, '.codex'), PARLEY_API_KEY: key } });
            // Codex reads more of the prompt from a standard input that is not a terminal, until it ends.
            running.child.stdin?.end();
            return running;
          };
    if (agent.kind === 'codex') {
      mkdirSync(join(home, '.codex'));
      writeFileSync(join(home, '.codex', 'config.toml'), codexProviderConfig(`${parley.url}/v1`, MODEL, { env_key: 'PARLEY_API_KEY' }));
    }
    const seconds = await threeTurns(turn);
    console.info(`${agent.name}: turns took ${seconds.map((s) => s.toFixed(1)).join(' s, ')} s`);

    const rows = (await usageRows()).slice(before.rows);
    expect(rows.length).toBeGreaterThanOrEqual(3);
    for (const row of rows) {
      expect(row).toMatchObject({ outcome: 'complete', api: agent.kind === 'claude' ? 'messages' : 'responses' });
      expect(row.endpoint).toMatch(/^parley-tiny http:\/\/127\.0\.0\.1:\d+\/v1$/);
      expect(micros(row.charged)).toBe(costOf(row));
    }
    // The agent's whole prompt (its instructions and tools, ~10k tokens and more) reached the engine, and later turns hit its prefix cache.
    expect(Number(rows[0].prompt_tokens)).toBeGreaterThan(8000);
    expect(rows.slice(1).some((r) => Number(r.cached_tokens) > 8000)).toBe(true);
    expect(before.balance - (await balance())).toBe(rows.reduce((sum, r) => sum + micros(r.charged), 0));
  }, 420_000);
});
