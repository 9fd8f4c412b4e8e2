import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { AgentsFirstSequencer } from './test/support/agents-first-sequencer.js';

/**
 * A file that times the main thread's stalls under large batches: it runs after the rest, alone. Beside another
 * file (a browser's, an agent's), a 2-core machine stalled its loop 100 to 280 ms where alone it stalls 15 to 50,
 * whatever the code under test did.
 */
const TIMED_ALONE = 'test/batches/large-lines.test.ts';

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
      { extends: true, test: { name: 'together', include: ['test/**/*.test.ts'], exclude: [TIMED_ALONE] } },
      // A later group: it starts once every file of the first has ended.
      { extends: true, test: { name: 'alone', include: [TIMED_ALONE], sequence: { groupOrder: 1 } } },
    ],
  },
});
