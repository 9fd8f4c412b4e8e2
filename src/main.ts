// The `parley` command.
//   parley serve       the gateway (defaults: config/quickstart.yaml, a local engine)
//   parley engine      the local upstream: a GGUF behind the OpenAI API
//   parley make-model  write Parley's own small model to a file
//   parley accounts | credit | keys | usage   the operator's commands
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigError } from './config-error.js';
import { DEFAULT_MODEL_CONTEXT, DEFAULT_MODEL_FILE, ensureDefaultModel } from './engine/model-maker.js';
import { startEngine } from './engine/server.js';
import { DEMO_EMAIL } from './operator/demo-account.js';
import { startGateway } from './gateway/start.js';
import { isOperatorCommand, OPERATOR_USAGE, runOperatorCommand } from './operator/commands.js';
import { CannotListen } from './listen.js';
import { sharedRedisFromEnv } from './redis/shared-redis.js';

const PACKAGE_ROOT = fileURLToPath(new URL('..', import.meta.url));
const USAGE = `usage: parley <command> [options]

  serve        run the gateway
               --config FILE (PARLEY_CONFIG; default config/quickstart.yaml)
               --port N (PORT; 8080)  --host H (HOST; 0.0.0.0)
               --metrics-port N (METRICS_PORT; default: GET /metrics on the API's port)
               --data-dir DIR (PARLEY_DATA_DIR; .parley)
               the shared Redis (default: a private redis-server in the data folder), one of
                 REDIS_URL (redis:// or rediss://; REDIS_CA_FILE for a private CA)
                 REDIS_SENTINELS=host:port,... with REDIS_SENTINEL_MASTER=name
                 REDIS_CLUSTER_NODES=host:port,...
               PARLEY_KEY_SECRET: the API-key hashing secret (required with a shared Redis)
  engine       serve a GGUF model behind the OpenAI API
               --model FILE.gguf (default: Parley's own model, made on first start)
               --model-id ID  --port N (8081)  --host H (127.0.0.1)
               --context-size N (${DEFAULT_MODEL_CONTEXT})  --parallel N (4)  --threads N (1 for a model under 256 MB, else one per usable core)  --data-dir DIR
  make-model   write Parley's own model: --out FILE
${OPERATOR_USAGE}`;

function dataDir(flag: string | undefined): string {
  return resolve(flag ?? process.env.PARLEY_DATA_DIR ?? '.parley');
}

/** A whole-number option (a flag or its environment variable), refused with its name when it is not one in range. */
function wholeNumber(text: string, name: string, min: number, max: number): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < min || n > max) throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, not "${text}"`);
  return n;
}

function onShutdown(close: () => Promise<void>): void {
  let closing = false;
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      if (closing) return;
      closing = true;
      close().then(() => process.exit(0), () => process.exit(1));
    });
  }
}

async function serve(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string' }, port: { type: 'string' }, 'metrics-port': { type: 'string' }, host: { type: 'string' }, 'data-dir': { type: 'string' } } });
  const metricsPort = values['metrics-port'] ?? process.env.METRICS_PORT;
  const gateway = await startGateway({
    configPath: resolve(values.config ?? process.env.PARLEY_CONFIG ?? join(PACKAGE_ROOT, 'config', 'quickstart.yaml')),
    dataDir: dataDir(values['data-dir']),
    host: values.host ?? process.env.HOST ?? '0.0.0.0',
    port: wholeNumber(values.port ?? process.env.PORT ?? '8080', '--port (or PORT)', 0, 65_535),
    metricsPort: metricsPort ? wholeNumber(metricsPort, '--metrics-port (or METRICS_PORT)', 0, 65_535) : undefined,
    redis: sharedRedisFromEnv(),
  });
  console.log(`parley: gateway listening on ${gateway.url}/v1`);
  if (!gateway.metricsUrl.startsWith(gateway.url)) console.log(`parley: metrics at ${gateway.metricsUrl}`);
  if (gateway.demo) {
    console.log(`parley: made a demo account (${DEMO_EMAIL}); its API key, shown this once:\n\n    ${gateway.demo.key}\n`);
    if (gateway.demo.password) {
      console.log(`parley: see its balance, keys and usage at ${gateway.url}/platform: log in as ${DEMO_EMAIL} with the password ${gateway.demo.password} (shown this once)\n`);
    }
  }
  onShutdown(gateway.close);
}

async function engine(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      model: { type: 'string' }, 'model-id': { type: 'string' }, port: { type: 'string' }, host: { type: 'string' },
      'context-size': { type: 'string' }, parallel: { type: 'string' }, threads: { type: 'string' }, 'data-dir': { type: 'string' },
    },
  });
  const options = {
    contextSize: wholeNumber(values['context-size'] ?? String(DEFAULT_MODEL_CONTEXT), '--context-size', 1, 1 << 24),
    parallel: wholeNumber(values.parallel ?? '4', '--parallel', 1, 256),
    threads: values.threads ? wholeNumber(values.threads, '--threads', 1, 1024) : undefined,
    host: values.host ?? '127.0.0.1',
    port: wholeNumber(values.port ?? '8081', '--port', 0, 65_535),
  };
  const givenModel = values.model && resolve(values.model);
  if (givenModel && !existsSync(givenModel)) throw new ConfigError(`no model file at ${givenModel}`);
  const modelPath = givenModel || ensureDefaultModel(join(dataDir(values['data-dir']), 'models', DEFAULT_MODEL_FILE));
  const running = await startEngine({ modelPath, modelId: values['model-id'] ?? 'parley-tiny', ...options });
  console.log(`parley engine: serving ${modelPath} on ${running.url} (${running.threads} ${running.threads === 1 ? 'thread' : 'threads'})`);
  process.send?.({ type: 'ready', url: running.url, contextSize: running.contextSize, threads: running.threads });
  onShutdown(running.close);
  // Started by a gateway: when it is gone (even killed with -9), its channel closes, and the engine stops too.
  if (process.connected) process.once('disconnect', () => process.kill(process.pid, 'SIGTERM'));
}

const [command, ...rest] = process.argv.slice(2);
const commands: Record<string, (argv: string[]) => Promise<void>> = {
  serve,
  engine,
  'make-model': async (argv) => {
    const { values } = parseArgs({ args: argv, options: { out: { type: 'string' } } });
    if (!values.out) throw new ConfigError('make-model needs --out FILE');
    console.log(ensureDefaultModel(resolve(values.out)));
  },
};

const run = commands[command ?? ''] ?? (command && isOperatorCommand(command) ? (argv: string[]) => runOperatorCommand(command, argv, dataDir) : undefined);
if (!run) {
  process.stdout.write(USAGE);
  process.exit(command ? 2 : 0);
}
run(rest).catch((err) => {
  const refusal = err instanceof ConfigError || err instanceof CannotListen;
  console.error(`parley: ${refusal ? err.message : (err as Error).stack}`);
  process.exit(1);
});
