// Claude Code itself (`claude -p`, headless) through Parley in front of a
// scripted upstream with a large window: it prints the upstream's text, and
// when the upstream calls its Bash tool, Claude Code runs it and its next
// request carries the output back as a tool message.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionBody, replyJson, chunk, writeEvents, type ReceivedRequest, type Script } from '../support/fake-upstream.js';
import { modelEntry, startGatewayOn, type GatewayOnUpstreams } from '../support/gateway.js';

const run = promisify(execFile);
const CLAUDE = join(import.meta.dirname, '../../node_modules/.bin/claude');

const usage = { prompt_tokens: 12_000, completion_tokens: 6, total_tokens: 12_006 };

/** Replies with `text`, whole or streamed. */
function reply(req: ReceivedRequest, res: Parameters<Script>[1], text: string) {
  if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content: text }), chunk({}, 'stop'), { ...chunk({}), choices: [], usage }]);
  replyJson(res, completionBody(text, usage));
}

/** Calls Bash once where the request offers it and the prompt asks for it; answers with the tool's output after. */
const agentUpstream: Script = (req, res) => {
  // The gateway's health probe.
  if (!req.path.endsWith('/chat/completions')) return replyJson(res, { data: [] });
  const toolMessage = req.body.messages.find((m: { role: string }) => m.role === 'tool');
  if (toolMessage) return reply(req, res, `The tool said: ${toolMessage.content}`);
  const wantsTool = JSON.stringify(req.body.messages).includes('run the echo tool');
  const offersBash = req.body.tools?.some((t: { function: { name: string } }) => t.function.name === 'Bash');
  if (!(wantsTool && offersBash)) return reply(req, res, 'Hello from the upstream');
  const call = { index: 0, id: 'call_bash_1', type: 'function', function: { name: 'Bash', arguments: JSON.stringify({ command: 'echo parley-tool-ok', description: 'Print a marker' }) } };
  writeEvents(res, [chunk({ role: 'assistant', content: null, tool_calls: [call] }), chunk({}, 'tool_calls'), { ...chunk({}), choices: [], usage }]);
};

let setup: GatewayOnUpstreams;
let home: string;

/** Four upstreams of the model, all the agent's. */
beforeAll(async () => {
  setup = await startGatewayOn([agentUpstream, agentUpstream, agentUpstream, agentUpstream], (urls) => ({
    gateway: { health: { probe: { intervalMs: 0 } } },
    models: [modelEntry('coder', urls.map((url) => ({ kind: 'vllm', url })), { contextWindow: 131_072, supports: { tools: true }, aliases: ['claude-*'] })],
  }));
  home = mkdtempSync(join(tmpdir(), 'parley-claude-home-'));
});

afterAll(async () => {
  await setup?.close();
  rmSync(home, { recursive: true, force: true });
});

const callsAt = (upstream: number) => setup.upstreams[upstream].received.filter((r) => r.path.endsWith('/chat/completions'));
const chatCalls = () => [0, 1, 2, 3].flatMap(callsAt);

function claude(prompt: string, ...flags: string[]) {
  return run(CLAUDE, ['-p', prompt, '--model', 'coder', ...flags], {
    cwd: home,
    timeout: 90_000,
    env: {
      PATH: process.env.PATH,
      HOME: home,
      ANTHROPIC_BASE_URL: setup.gw.url,
      ANTHROPIC_API_KEY: setup.gw.apiKey,
      CLAUDE_CODE_MAX_CONTEXT_TOKENS: '131072',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_AUTOUPDATER: '1',
    },
  });
}

describe('Claude Code through Parley', () => {
  it('exits 0 and prints the upstream text', async () => {
    const { stdout } = await claude('say hi');
    expect(stdout.trim()).toBe('Hello from the upstream');
    const main = chatCalls().find((r) => JSON.stringify(r.body.messages).includes('say hi'))!;
    // Its billing header never reaches the upstream.
    expect(JSON.stringify(main.body)).not.toContain('x-anthropic-billing-header');
    expect(main.body.messages[0].role).toBe('system');
  }, 120_000);

  it('runs the Bash tool the upstream calls, and its next request carries the output', async () => {
    const { stdout } = await claude('please run the echo tool', '--allowedTools', 'Bash');
    expect(stdout.trim()).toBe('The tool said: parley-tool-ok');
    const followUp = chatCalls().find((r) => r.body.messages.some((m: { role: string }) => m.role === 'tool'))!;
    const toolMessage = followUp.body.messages.find((m: { role: string }) => m.role === 'tool');
    expect(toolMessage).toMatchObject({ tool_call_id: 'toolu_call_bash_1', content: expect.stringContaining('parley-tool-ok') });
  }, 120_000);

  it('keeps each session on one upstream for all its turns, though every session starts with the same system prompt', async () => {
    const sessions = ['alpha', 'bravo', 'charlie', 'delta'];
    await Promise.all(sessions.map((s) => claude(`please run the echo tool for task ${s}`, '--allowedTools', 'Bash')));
    const homes = sessions.map((s) => {
      const at = [0, 1, 2, 3].filter((u) => callsAt(u).some((r) => JSON.stringify(r.body.messages).includes(`task ${s}`)));
      // Its first turn and the turn that carries the tool's output back.
      expect([0, 1, 2, 3].flatMap(callsAt).filter((r) => JSON.stringify(r.body.messages).includes(`task ${s}`)).length).toBeGreaterThanOrEqual(2);
      expect(at).toHaveLength(1);
      return at[0];
    });
    expect(new Set(homes).size).toBeGreaterThanOrEqual(2);
  }, 180_000);
});
