import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { AgentsFirstSequencer } from './test/support/agents-first-sequencer.js';

/**
 * Files that time the main thread's stalls: they run after the rest, one at a time. Beside another file (a
 * browser's, an agent's), a 2-core machine stalled large-lines' loop 100 to 280 ms where alone it stalls 15 to 50,
 * whatever the code under test did; main-thread's /healthz bound of 250 ms took three rounds in CI (449, 339, 195).
 */
const TIMED_ALONE = ['test/batches/large-lines.test.ts', 'test/gateway/main-thread.test.ts'];

export default defineConfig({
  test: {
    globalSetup: ['test/support/build.ts'],
    // node-llama-cpp is a native addon: run files in child processes, not worker threads.
    pool: 'forks',
    // Most files wait on engines, real clients and timers more than they compute, so two run at once even on
    // a 2-core machine (where vitest's default is one): the whole run took 412 s there against 708 s, all passing.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    sequence: { sequencer: AgentsFirstSequencer },
    testTimeout: 60_000,
    // The admin API is on only with a token (test/support/gateway.ts: asAdmin).
    env: { PARLEY_ADMIN_TOKEN: 'test-admin-token' },
    hookTimeout: 120_000,
    projects: [
      { extends: true, test: { name: 'together', include: ['test/**/*.test.ts'], exclude: TIMED_ALONE } },
      // A later group, which starts once every file of the first has ended; its files run in one process, in turn.
      { extends: true, test: { name: 'alone', include: TIMED_ALONE, sequence: { groupOrder: 1 }, poolOptions: { forks: { singleFork: true } } } },
    ],
  },
});
