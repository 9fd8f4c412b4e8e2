// Codex itself (`codex exec`, headless) through Parley's Responses API in
// front of a scripted upstream: it prints the upstream's text, and when the
// upstream calls its exec_command tool, Codex runs it and its next request
// carries the output back as a tool message.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chunk, completionBody, replyJson, writeEvents, type ReceivedRequest, type Script } from '../support/fake-upstream.js';
import { modelEntry, startGatewayOn, type GatewayOnUpstreams } from '../support/gateway.js';

const run = promisify(execFile);
const CODEX = join(import.meta.dirname, '../../node_modules/.bin/codex');

const usage = { prompt_tokens: 9_000, completion_tokens: 6, total_tokens: 9_006 };

function reply(req: ReceivedRequest, res: Parameters<Script>[1], text: string) {
  if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content: text }), chunk({}, 'stop'), { ...chunk({}), choices: [], usage }]);
  replyJson(res, completionBody(text, usage));
}

let shellTool = '';

/** Calls Codex's shell tool once where the prompt asks for it; answers with the tool's output after. */
const agentUpstream: Script = (req, res) => {
  if (!req.path.endsWith('/chat/completions')) return replyJson(res, { data: [] });
  const toolMessage = req.body.messages.find((m: { role: string }) => m.role === 'tool');
  if (toolMessage) return reply(req, res, `The tool said: ${toolMessage.content}`);
  const names: string[] = (req.body.tools ?? []).map((t: { function: { name: string } }) => t.function.name);
  shellTool = names.find((n) => n === 'exec_command' || n.endsWith('__exec_command')) ?? names.find((n) => n === 'shell') ?? '';
  if (!JSON.stringify(req.body.messages).includes('run the echo tool') || !shellTool) return reply(req, res, 'Hello from the upstream');
  const args = shellTool === 'shell' ? { command: ['echo', 'parley-tool-ok'] } : { cmd: 'echo parley-tool-ok' };
  const call = { index: 0, id: 'call_exec_1', type: 'function', function: { name: shellTool, arguments: JSON.stringify(args) } };
  writeEvents(res, [chunk({ role: 'assistant', content: null, tool_calls: [call] }), chunk({}, 'tool_calls'), { ...chunk({}), choices: [], usage }]);
};

let setup: GatewayOnUpstreams;
let home: string;

/** Four upstreams of the model, all the agent's. */
beforeAll(async () => {
  setup = await startGatewayOn([agentUpstream, agentUpstream, agentUpstream, agentUpstream], (urls) => ({
    gateway: { health: { probe: { intervalMs: 0 } } },
    models: [modelEntry('coder', urls.map((url) => ({ kind: 'vllm', url })), { contextWindow: 131_072, supports: { tools: true } })],
  }));
  home = mkdtempSync(join(tmpdir(), 'parley-codex-home-'));
  mkdirSync(join(home, '.codex'));
  writeFileSync(join(home, '.codex', 'config.toml'), [
    'model = "coder"',
    'model_provider = "parley"',
    'model_context_window = 131072',
    '[model_providers.parley]',
    'name = "Parley"',
    `base_url = "${setup.gw.url}/v1"`,
    'env_key = "PARLEY_API_KEY"',
    'wire_api = "responses"',
    '',
  ].join('\n'));
});

afterAll(async () => {
  await setup?.close();
  rmSync(home, { recursive: true, force: true });
});

const callsAt = (upstream: number) => setup.upstreams[upstream].received.filter((r) => r.path.endsWith('/chat/completions'));
const chatCalls = () => [0, 1, 2, 3].flatMap(callsAt);

function codex(prompt: string) {
  const running = run(CODEX, ['exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', prompt], {
    cwd: home,
    timeout: 90_000,
    env: { PATH: process.env.PATH, HOME: home, CODEX_HOME: join(home, '.codex'), PARLEY_API_KEY: setup.gw.apiKey },
  });
  // Codex reads more of the prompt from a standard input that is not a terminal, until it ends.
  running.child.stdin?.end();
  return running;
}

describe('Codex through Parley', () => {
  it('exits 0 and prints the upstream text', async () => {
    const { stdout } = await codex('say hi');
    expect(stdout.trim()).toBe('Hello from the upstream');
  }, 120_000);

  it('runs the shell tool the upstream calls, and its next request carries the output', async () => {
    const { stdout } = await codex('please run the echo tool');
    expect(stdout.trim()).toMatch(/^The tool said: [^]*\nparley-tool-ok$/);
    expect(shellTool).toBe('exec_command');
    const followUp = chatCalls().find((r) => r.body.messages.some((m: { role: string }) => m.role === 'tool'))!;
    const toolMessage = followUp.body.messages.find((m: { role: string }) => m.role === 'tool');
    expect(toolMessage).toMatchObject({ tool_call_id: 'call_exec_1', content: expect.stringContaining('parley-tool-ok') });
  }, 120_000);

  it('keeps each session on one upstream for all its turns by the prompt_cache_key it sends, though every session starts with the same instructions', async () => {
    const sessions = ['alpha', 'bravo', 'charlie', 'delta'];
    await Promise.all(sessions.map((s) => codex(`please run the echo tool for task ${s}`)));
    const homes = sessions.map((s) => {
      const mine = (u: number) => callsAt(u).filter((r) => JSON.stringify(r.body.messages).includes(`task ${s}`));
      expect(chatCalls().filter((r) => JSON.stringify(r.body.messages).includes(`task ${s}`)).length).toBeGreaterThanOrEqual(2);
      const at = [0, 1, 2, 3].filter((u) => mine(u).length > 0);
      expect(at).toHaveLength(1);
      return at[0];
    });
    expect(new Set(homes).size).toBeGreaterThanOrEqual(2);
  }, 180_000);
});
