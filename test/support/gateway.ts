// Starts a real gateway in the test process on a routing file the test
// writes, and an `openai` client pointed at it.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { stringify } from 'yaml';
import { startGateway, type RunningGateway } from '../../src/gateway/start.js';

export interface TestGateway extends RunningGateway {
  client: OpenAI;
  configPath: string;
  dataDir: string;
  writeConfig(config: unknown): void;
}

export function modelEntry(id: string, endpoints: unknown[], extra: Record<string, unknown> = {}) {
  return {
    id,
    contextWindow: 4096,
    pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 },
    endpoints,
    ...extra,
  };
}

export async function startTestGateway(config: unknown, dataDir?: string): Promise<TestGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'parley-test-'));
  const configPath = join(dir, 'routing.yaml');
  const writeConfig = (c: unknown) => writeFileSync(configPath, stringify(c));
  writeConfig(config);
  const data = dataDir ?? join(dir, 'data');
  const gateway = await startGateway({ configPath, dataDir: data, host: '127.0.0.1', port: 0 });
  const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'test-key', maxRetries: 0 });
  return { ...gateway, client, configPath, dataDir: data, writeConfig };
}

/** Raw POST to the gateway, for what the openai client hides (status, headers, raw SSE text). */
export async function postChat(url: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}
