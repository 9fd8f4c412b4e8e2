// Tests that start `bin/parley.js` as a process need dist/ to match src/:
// build once before any test file runs (once a run: each of vitest.config.ts's
// projects has this setup, and a run of one file needs it as much).
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export default function setup(): void {
  if (process.env.PARLEY_TEST_BUILT) return;
  const root = fileURLToPath(new URL('../..', import.meta.url));
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], { cwd: root, stdio: 'inherit' });
  process.env.PARLEY_TEST_BUILT = '1';
}
