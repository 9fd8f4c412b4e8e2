// The coding agents the tests run: the releases package.json pins, and the
// newest ones, which scripts/install.sh puts in .parley-test/newest-clients when
// it installs the test tools.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '../..');
const PINNED = join(ROOT, 'node_modules/.bin');
export const NEWEST_CLIENTS = join(ROOT, '.parley-test/newest-clients');
const NEWEST = join(NEWEST_CLIENTS, 'node_modules/.bin');

export interface AgentBinary {
  kind: 'claude' | 'codex';
  /** The agent and its version, as `--version` prints it. */
  name: string;
  bin: string;
}

function agent(kind: AgentBinary['kind'], folder: string, which: string): AgentBinary {
  const bin = join(folder, kind);
  if (!existsSync(bin)) throw new Error(`${which} ${kind} is not installed at ${bin}: run PARLEY_INSTALL_TEST_TOOLS=1 sh scripts/install.sh (it asks the npm registry)`);
  return { kind, name: `${execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim()} (${which})`, bin };
}

/** Claude Code and Codex, pinned and newest. */
export function agentBinaries(): AgentBinary[] {
  return [agent('claude', PINNED, 'pinned'), agent('claude', NEWEST, 'newest'), agent('codex', PINNED, 'pinned'), agent('codex', NEWEST, 'newest')];
}

/** The newest release of one agent. */
export const newestAgent = (kind: AgentBinary['kind']) => agent(kind, NEWEST, 'newest');

/** A Codex config.toml that points it at Parley as a provider, authenticated as `auth` says (`env_key`, or a command). */
export function codexProviderConfig(baseUrl: string, model: string, auth: { env_key: string } | { command: string; args: string[] }): string {
  const authLines = 'env_key' in auth ? [`env_key = "${auth.env_key}"`] : ['', '[model_providers.parley.auth]', `command = "${auth.command}"`, `args = ${JSON.stringify(auth.args)}`];
  return [`model = "${model}"`, 'model_provider = "parley"', '', '[model_providers.parley]', 'name = "Parley"', `base_url = "${baseUrl}"`, 'wire_api = "responses"', ...authLines, ''].join('\n');
}
