// The client SDKs the tests run: the releases package.json pins, and the
// newest ones, which scripts/install.sh puts beside the newest agents. A team
// upgrades its SDK when its release comes out, not when Parley's lock file
// moves: the newest major is the one it meets first.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as pinnedAnthropic from '@anthropic-ai/sdk';
import * as pinnedAiAnthropic from '@ai-sdk/anthropic';
import * as pinnedAiOpenAI from '@ai-sdk/openai';
import * as pinnedAgents from '@openai/agents';
import * as pinnedAi from 'ai';
import * as pinnedOpenAI from 'openai';
import { NEWEST_CLIENTS } from './agents.js';

/** One release of each SDK, typed as the pinned ones: the tests call only what both majors have. */
export interface SdkRelease {
  /** Pinned or newest, and each package's version: for a test's name. */
  name: string;
  openai: typeof pinnedOpenAI;
  anthropic: typeof pinnedAnthropic;
  agents: typeof pinnedAgents;
  ai: typeof pinnedAi;
  aiOpenAI: typeof pinnedAiOpenAI;
  aiAnthropic: typeof pinnedAiAnthropic;
}

const PACKAGES = ['openai', '@anthropic-ai/sdk', '@openai/agents', 'ai', '@ai-sdk/openai', '@ai-sdk/anthropic'] as const;

function packageJson(folder: string, name: string): { version: string; exports?: unknown } {
  try {
    return JSON.parse(readFileSync(join(folder, 'node_modules', name, 'package.json'), 'utf8'));
  } catch {
    throw new Error(`${name} is not installed in ${folder}: run PARLEY_INSTALL_TEST_TOOLS=1 sh scripts/install.sh (it asks the npm registry for the newest)`);
  }
}

/** A package's ES module entry, as its `exports` name it for `import`. */
function moduleEntry(folder: string, name: string): string {
  type Target = string | { import?: Target; default?: Target };
  const { exports } = packageJson(folder, name) as { exports: Target | Record<string, Target> };
  const main = typeof exports === 'object' && '.' in exports ? (exports as Record<string, Target>)['.'] : (exports as Target);
  const pick = (t: Target): string => (typeof t === 'string' ? t : pick((t.import ?? t.default)!));
  return pathToFileURL(join(folder, 'node_modules', name, pick(main))).href;
}

const versionsIn = (folder: string) => PACKAGES.map((name) => `${name} ${packageJson(folder, name).version}`).join(', ');

/** Each release as `describe.each` takes it, named in full. */
export const eachRelease = (releases: SdkRelease[]) => releases.map((release) => [release.name, release] as const);

/** The pinned SDKs, and the newest. */
export async function sdkReleases(): Promise<SdkRelease[]> {
  const [openai, anthropic, agents, ai, aiOpenAI, aiAnthropic] = await Promise.all(PACKAGES.map((name) => import(moduleEntry(NEWEST_CLIENTS, name))));
  return [
    { name: `pinned (${versionsIn(join(import.meta.dirname, '../..'))})`, openai: pinnedOpenAI, anthropic: pinnedAnthropic, agents: pinnedAgents, ai: pinnedAi, aiOpenAI: pinnedAiOpenAI, aiAnthropic: pinnedAiAnthropic },
    { name: `newest (${versionsIn(NEWEST_CLIENTS)})`, openai, anthropic, agents, ai, aiOpenAI, aiAnthropic },
  ];
}
