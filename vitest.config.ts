import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/build.ts'],
    // node-llama-cpp is a native addon: run files in child processes, not worker threads.
    pool: 'forks',
    testTimeout: 60_000,
    // The admin API is on only with a token (test/support/gateway.ts: asAdmin).
    env: { PARLEY_ADMIN_TOKEN: 'test-admin-token' },
    hookTimeout: 120_000,
  },
});
