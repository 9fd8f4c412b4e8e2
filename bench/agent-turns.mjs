// Claude Code and Codex on the quickstart: `parley serve` on its defaults (a
// fresh data folder), each agent's three turns of one session timed, and the
// engine's memory after. Each agent runs twice: given only the base URL, the
// key and the model, then as the README says (told the window, or asking
// Parley for it).
//   node bench/agent-turns.mjs
// The agents: the pinned ones in node_modules, the newest ones where
// scripts/install.sh put them for the tests (PARLEY_INSTALL_TEST_TOOLS=1).
import { execFile, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..');
const dir = mkdtempSync(join(tmpdir(), 'parley-agent-turns-'));
const serve = spawn(join(root, 'bin/parley.js'), ['serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', join(dir, 'data')], { env: { ...process.env, REDIS_URL: '', PARLEY_KEY_SECRET: '' } });
let output = '';
serve.stdout.on('data', (d) => (output += d));
serve.stderr.on('data', (d) => (output += d));
const started = performance.now();
while (!/sk-parley-\S+/.test(output)) await new Promise((r) => setTimeout(r, 100));
const url = /listening on (http:\/\/\S+)\/v1/.exec(output)[1];
const key = /(sk-parley-\S+)/.exec(output)[1];
console.log(`parley serve ready in ${((performance.now() - started) / 1000).toFixed(1)} s (a fresh data folder: the model is made)`);

const enginePid = () => execFileSync('pgrep', ['-f', `${join(dir, 'data')}.* engine|engine .*${join(dir, 'data')}`], { encoding: 'utf8' }).trim().split('\n')[0];
const memory = () => {
  const status = readFileSync(`/proc/${enginePid()}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status)[1]);
  return `RSS ${(kb('VmRSS') / 1024).toFixed(0)} MiB, peak ${(kb('VmHWM') / 1024).toFixed(0)} MiB`;
};
console.log(`engine before any turn: ${memory()}`);

const agents = [
  ['claude', join(root, 'node_modules/.bin/claude')],
  ['claude', join(root, '.parley-test/newest-agents/node_modules/.bin/claude')],
  ['codex', join(root, 'node_modules/.bin/codex')],
  ['codex', join(root, '.parley-test/newest-agents/node_modules/.bin/codex')],
];
const prompts = ['say hi', 'say it again', 'and once more'];
for (const [kind, bin, recipe] of agents.flatMap((a) => [[...a, 'only URL, key, model'], [...a, 'README']])) {
  const version = execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
  const home = mkdtempSync(join(dir, 'home-'));
  execFileSync('git', ['init', '-q', home]);
  const env = { PATH: process.env.PATH, HOME: home };
  const readme = recipe === 'README';
  if (kind === 'codex') {
    mkdirSync(join(home, '.codex'));
    // The README's recipe asks Parley for the window: a command prints the key.
    const auth = readme ? '\n[model_providers.parley.auth]\ncommand = "printenv"\nargs = ["PARLEY_API_KEY"]\n' : 'env_key = "PARLEY_API_KEY"\n';
    writeFileSync(join(home, '.codex/config.toml'), `model = "parley-tiny"\nmodel_provider = "parley"\n\n[model_providers.parley]\nname = "Parley"\nbase_url = "${url}/v1"\nwire_api = "responses"\n${auth}`);
  }
  const seconds = [];
  for (let n = 0; n < 3; n++) {
    const t0 = performance.now();
    if (kind === 'claude') {
      const window = readme ? { CLAUDE_CODE_MAX_CONTEXT_TOKENS: '65536' } : {};
      await run(bin, ['-p', ...(n ? ['--continue'] : []), prompts[n], '--model', 'parley-tiny'], { cwd: home, env: { ...env, ANTHROPIC_BASE_URL: url, ANTHROPIC_API_KEY: key, ...window } });
    } else {
      const turn = run(bin, ['exec', ...(n ? ['resume', '--last'] : []), prompts[n]], { cwd: home, env: { ...env, CODEX_HOME: join(home, '.codex'), PARLEY_API_KEY: key } });
      turn.child.stdin.end();
      const { stderr } = await turn;
      if (readme && /fallback metadata/.test(stderr)) throw new Error(`${version} did not read the model from Parley's catalog`);
    }
    seconds.push((performance.now() - t0) / 1000);
  }
  console.log(`${version}, ${recipe}: turns ${seconds.map((s) => s.toFixed(1)).join(' s, ')} s; engine ${memory()}`);
}
serve.kill('SIGTERM');
await new Promise((r) => serve.once('exit', r));
rmSync(dir, { recursive: true, force: true });
