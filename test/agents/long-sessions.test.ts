// The model's window, through the real agents and the real engine on a small
// window. Codex learns it from Parley's model catalog when its provider
// authenticates with a command (then it asks); Claude Code cannot ask a gateway
// for a window. A session that outgrows the window the agent believes ends
// with Parley's context error in the agent's words, at once and unpaid: it
// never hangs.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readBalance, type Balance } from '../../src/billing/credit-ledger.js';
import { readUsageEvents, type UsageEvent } from '../../src/billing/usage-events.js';
import { agentBinaries, codexProviderConfig, type AgentBinary } from '../support/agents.js';
import { modelEntry, startTestGateway, type TestGateway } from '../support/gateway.js';

const run = promisify(execFile);
const [, claudeNewest, codexPinned, codexNewest] = agentBinaries();

/** About `tokens` tokens of English words (the engine's tokenizer makes most of them one token each), the same every run. */
function text(tokens: number, seed: number): string {
  const words = 'the be to of and a in that have it for not on with he as you do at this but his by from they we say her she or an will my one all would there'.split(' ');
  let state = seed;
  const out: string[] = [];
  for (let i = 0; i < tokens; i++) {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    out.push(words[state % words.length]);
  }
  return out.join(' ');
}

/** A model served by the real engine with a `window`-token window, and agent instructions, so Codex's catalog lists it. */
const smallModel = (id: string, window: number) =>
  modelEntry(id, [{ kind: 'parley-engine', local: { contextSize: window, parallel: 2 } }], {
    contextWindow: window,
    pricesPerMillion: { inputCacheMiss: 0.5, inputCacheHit: 0.05, output: 1.5 },
    agentInstructions: 'You are a coding agent. Answer briefly.',
  });

let gw: TestGateway;
let dir: string;

beforeAll(async () => {
  gw = await startTestGateway({ models: [smallModel('window-16k', 16_384)] });
  dir = mkdtempSync(join(gw.dataDir, '..', 'agents-'));
}, 120_000);

afterAll(async () => {
  await gw?.close();
});

const freshHome = () => mkdtempSync(join(dir, 'home-'));

/** Starts `codex exec` in `home` with `env` added; its standard input ends at once (Codex reads more of the prompt from it until then). */
function startCodex(agent: AgentBinary, home: string, args: string[], env: Record<string, string> = {}) {
  const running = run(agent.bin, ['exec', '--skip-git-repo-check', ...args], { cwd: home, timeout: 120_000, env: { PATH: process.env.PATH, HOME: home, CODEX_HOME: join(home, '.codex'), ...env } });
  running.child.stdin?.end();
  return running;
}

/** Runs `codex exec`; a failure says how it ended, without the long prompt it was given. */
function codex(agent: AgentBinary, home: string, args: string[]) {
  return startCodex(agent, home, args).catch((err: { code: number; stderr: string }) => {
    throw new Error(`codex exited ${err.code}: ${err.stderr.split('\n').filter((line) => line.length < 400).join('\n').slice(-1500)}`);
  });
}

/** A Codex home whose provider authenticates with a command printing the key: Codex then asks Parley for its model catalog. */
function codexAskingParley(model: string): string {
  const home = freshHome();
  mkdirSync(join(home, '.codex'));
  writeFileSync(join(home, 'key'), gw.apiKey);
  writeFileSync(join(home, '.codex', 'config.toml'), codexProviderConfig(`${gw.url}/v1`, model, { command: 'cat', args: [join(home, 'key')] }));
  return home;
}

describe('Codex', () => {
  it.each([codexPinned, codexNewest])('$name, asking, reads the model from the catalog, not its fallback metadata', async (agent) => {
    const { stderr } = await codex(agent, codexAskingParley('window-16k'), ['say hi']);
    expect(stderr).not.toMatch(/fallback metadata/);
  }, 180_000);

  it(`${codexNewest.name}, not asking (its key in an environment variable), shows Parley's context error for a prompt over the window, exits, and pays nothing`, async () => {
    const home = freshHome();
    mkdirSync(join(home, '.codex'));
    writeFileSync(join(home, '.codex', 'config.toml'), codexProviderConfig(`${gw.url}/v1`, 'window-16k', { env_key: 'PARLEY_API_KEY' }));
    const before = await readBalance(gw.redis.client, gw.account);
    const started = performance.now();
    const refused = await startCodex(codexNewest, home, [`Summarize: ${text(20_000, 5)}`], { PARLEY_API_KEY: gw.apiKey }).then(
      () => undefined,
      (err: { code: number; stderr: string }) => err,
    );
    expect(refused?.code).toBe(1);
    // Codex words Parley's context_length_exceeded in its own way.
    expect(refused?.stderr).toMatch(/ran out of room in the model's context window/);
    expect(performance.now() - started).toBeLessThan(60_000);
    expect(await readBalance(gw.redis.client, gw.account)).toEqual(before);
  }, 180_000);
});

const eventsSince = async (since: number) => {
  const events: UsageEvent[] = [];
  for await (const e of readUsageEvents(gw.redis.client, gw.account)) if (e.time >= since) events.push(e);
  return events;
};
const paid = (before?: Balance, after?: Balance) => before!.granted + before!.toppedUp - (after!.granted + after!.toppedUp);

function claude(agent: AgentBinary, home: string, model: string, prompt: string, resume = true) {
  return run(agent.bin, ['-p', ...(resume ? ['--continue'] : []), prompt, '--model', model], {
    cwd: home,
    timeout: 120_000,
    env: { PATH: process.env.PATH, HOME: home, ANTHROPIC_BASE_URL: gw.url, ANTHROPIC_API_KEY: gw.apiKey },
  });
}

describe('Claude Code', () => {
  it(`${claudeNewest.name}, told no window, shows Parley's context error when the session outgrows it, exits, and pays nothing for the refused turn`, async () => {
    const home = freshHome();
    await claude(claudeNewest, home, 'window-16k', 'say hi', false);
    const before = await readBalance(gw.redis.client, gw.account);
    const turnStart = Date.now();
    const started = performance.now();
    const refused = await claude(claudeNewest, home, 'window-16k', `Summarize: ${text(8_000, 7)}`).then(
      () => undefined,
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
    expect(refused?.code).toBe(1);
    expect(refused?.stdout + refused!.stderr).toMatch(/prompt is too long/i);
    expect(performance.now() - started).toBeLessThan(60_000);
    // What it paid over the turn is what its completed requests cost (Claude Code sends more than the turn's own):
    // the refused request is in neither.
    const events = await eventsSince(turnStart);
    expect(events.every((e) => e.outcome === 'complete')).toBe(true);
    expect(paid(before, await readBalance(gw.redis.client, gw.account))).toBe(events.reduce((sum, e) => sum + e.charged, 0));
  }, 240_000);
});

