import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { AgentsFirstSequencer } from './test/support/agents-first-sequencer.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
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
  },
});
