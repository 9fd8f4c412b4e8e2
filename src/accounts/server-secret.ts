// The secret API keys are hashed with. Every replica must hold the same one,
// so with a shared Redis it comes from PARLEY_KEY_SECRET (a Kubernetes
// Secret); a single Parley on its private Redis keeps one in its data folder.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../config-error.js';

export function resolveKeySecret(dataDir: string, sharedRedis: boolean): string {
  const fromEnv = process.env.PARLEY_KEY_SECRET;
  if (fromEnv) {
    if (fromEnv.length < 32) throw new ConfigError('PARLEY_KEY_SECRET must be at least 32 characters');
    return fromEnv;
  }
  if (sharedRedis) throw new ConfigError('with a shared Redis (REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES), PARLEY_KEY_SECRET must be set too (the same on every replica)');
  const file = join(dataDir, 'key-secret');
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, randomBytes(32).toString('base64url'), { mode: 0o600, flag: 'wx' });
  }
  return readFileSync(file, 'utf8').trim();
}
