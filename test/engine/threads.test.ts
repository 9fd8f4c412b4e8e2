// How many CPU threads the local engine evaluates with when none are asked
// for: never node-llama-cpp's two per core, one for a small model.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { coresWithinQuota, defaultThreads, localLlama } from '../../src/engine/llama.js';
import { DEFAULT_MODEL_FILE, ensureDefaultModel } from '../../src/engine/model-maker.js';
import { startEngine } from '../../src/engine/server.js';
import { LocalEngines } from '../../src/engine/supervisor.js';

const dir = mkdtempSync(join(tmpdir(), 'parley-threads-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const MB = 1024 * 1024;

describe('engine threads', () => {
  it('are one for a model under 256 MB and one per core above, never more than the cores', async () => {
    const llama = await localLlama();
    expect(defaultThreads(llama, 16 * MB)).toBe(1);
    expect(defaultThreads(llama, 255 * MB)).toBe(1);
    // One per core this process may use: a container's CPU quota may allow fewer (next test).
    const cores = Math.min(llama.cpuMathCores, availableParallelism());
    for (const size of [531 * MB, 70_000 * MB]) {
      expect(defaultThreads(llama, size)).toBeGreaterThanOrEqual(1);
      expect(defaultThreads(llama, size)).toBeLessThanOrEqual(cores);
      if (!existsSync('/sys/fs/cgroup/cpu.max')) expect(defaultThreads(llama, size)).toBe(cores);
    }
  });

  it('stay within a container\'s CPU quota (cgroup cpu.max)', () => {
    expect(coresWithinQuota(64, '200000 100000\n')).toBe(2);
    expect(coresWithinQuota(64, '150000 100000')).toBe(1);
    expect(coresWithinQuota(64, '50000 100000')).toBe(1);
    expect(coresWithinQuota(4, '800000 100000')).toBe(4);
    expect(coresWithinQuota(8, 'max 100000')).toBe(8);
    expect(coresWithinQuota(8, undefined)).toBe(8);
  });

  it('default to one on Parley\'s own model, and are what --threads asks otherwise', async () => {
    const modelPath = ensureDefaultModel(join(dir, DEFAULT_MODEL_FILE));
    for (const [threads, expected] of [[undefined, 1], [2, 2]] as const) {
      const engine = await startEngine({ modelPath, modelId: 'm', contextSize: 512, parallel: 1, threads, host: '127.0.0.1', port: 0 });
      try {
        expect(engine.threads).toBe(expected);
      } finally {
        await engine.close();
      }
    }
  });

  it('of an engine Parley starts are what its routing entry asks, or the default', async () => {
    const engines = new LocalEngines(dir);
    try {
      expect((await engines.start({ contextSize: 512, parallel: 1 }, 'own')).threads).toBe(1);
      expect((await engines.start({ contextSize: 512, parallel: 1, threads: 2 }, 'two')).threads).toBe(2);
    } finally {
      await engines.stopAll();
    }
  });
});
