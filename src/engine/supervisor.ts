// Local engines that Parley starts itself for endpoints written as `local:`
// in the routing file (the quickstart's upstream). Each runs as a child
// `parley engine` process, so llama.cpp never shares the gateway's event
// loop, and is restarted on the same port if it crashes. An engine asked to
// stop (SIGTERM or SIGINT, as Ctrl-C sends to the whole process group) is not
// restarted, and an engine whose gateway is gone stops itself (see main.ts).
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LocalEngineConfig } from '../config.js';
import { DEFAULT_MODEL_CONTEXT, DEFAULT_MODEL_FILE, ensureDefaultModel } from './model-maker.js';

const PARLEY_BIN = fileURLToPath(new URL('../../bin/parley.js', import.meta.url));

export interface LocalEngineInfo {
  url: string;
  modelPath: string;
  contextSize: number;
  threads: number;
}

interface Ready {
  type: 'ready';
  url: string;
  contextSize: number;
  threads: number;
}

class ManagedEngine {
  private child: ChildProcess | undefined;
  private stopping = false;
  private port = 0;
  readonly ready: Promise<LocalEngineInfo>;

  constructor(readonly modelPath: string, private readonly args: string[]) {
    this.ready = this.spawn();
  }

  private spawn(): Promise<LocalEngineInfo> {
    return new Promise((resolve, reject) => {
      const child = fork(PARLEY_BIN, ['engine', '--model', this.modelPath, '--port', String(this.port), '--host', '127.0.0.1', ...this.args], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      this.child = child;
      let started = false;
      child.on('message', (m: Ready) => {
        if (m?.type !== 'ready') return;
        started = true;
        this.port = Number(new URL(m.url).port);
        resolve({ url: m.url, modelPath: this.modelPath, contextSize: m.contextSize, threads: m.threads });
      });
      child.on('exit', (code, signal) => {
        if (!started) return reject(new Error(`local engine for ${this.modelPath} exited during start (${signal ?? code})`));
        // An engine exits 0 only when told to stop; a crash is a failure code or a fatal signal.
        if (this.stopping || code === 0 || signal === 'SIGTERM' || signal === 'SIGINT') return;
        console.error(`parley: local engine on port ${this.port} exited (${signal ?? code}); restarting`);
        setTimeout(() => {
          if (!this.stopping) this.spawn().catch((err) => console.error(`parley: ${err.message}`));
        }, 500).unref();
      });
    });
  }

  stop(): Promise<void> {
    this.stopping = true;
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  }
}

export class LocalEngines {
  private readonly engines = new Map<string, ManagedEngine>();

  constructor(private readonly dataDir: string) {}

  /** Starts the engine for `local` (or finds it running); keyed by its settings. */
  start(local: LocalEngineConfig, modelId: string): Promise<LocalEngineInfo> {
    const modelPath = local.model ?? ensureDefaultModel(join(this.dataDir, 'models', DEFAULT_MODEL_FILE));
    const contextSize = local.contextSize ?? DEFAULT_MODEL_CONTEXT;
    const args = ['--model-id', modelId, '--context-size', String(contextSize), '--parallel', String(local.parallel ?? 4), ...(local.threads ? ['--threads', String(local.threads)] : [])];
    const key = JSON.stringify([modelPath, ...args]);
    let engine = this.engines.get(key);
    if (!engine) {
      engine = new ManagedEngine(modelPath, args);
      this.engines.set(key, engine);
    }
    return engine.ready;
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.engines.values()].map((e) => e.stop()));
    this.engines.clear();
  }
}
