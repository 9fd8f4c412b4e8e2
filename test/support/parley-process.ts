// `bin/parley.js` as its own process, for what only a process shows: its
// printed output, a kill -9, an exit code.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const BIN = fileURLToPath(new URL('../../bin/parley.js', import.meta.url));
// The bin runs as an executable, as every launcher runs it (its first line holds Parley's Node flags), on the Node running the tests.
const withThisNode = (env: Record<string, string>) => ({ ...process.env, ...env, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` });

export interface ParleyProcess {
  url: string;
  child: ChildProcess;
  output(): string;
  /** Sends the signal and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export async function startParleyServe(args: string[], env: Record<string, string> = {}): Promise<ParleyProcess> {
  const child = spawn(BIN, ['serve', '--host', '127.0.0.1', '--port', '0', ...args], {
    env: withThisNode(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`parley serve did not start:\n${output}`)), 60_000);
    const look = () => {
      const m = /listening on (http:\/\/\S+)\/v1/.exec(output);
      if (m) {
        clearTimeout(timer);
        // The demo key is printed right after; give the line a moment to arrive.
        setTimeout(() => resolve(m[1]), 100);
      }
    };
    child.stdout!.on('data', look);
    child.once('exit', (code) => reject(new Error(`parley serve exited (${code}):\n${output}`)));
  });
  return {
    url,
    child,
    output: () => output,
    stop: (signal = 'SIGTERM') =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill(signal);
      }),
  };
}

/** Starts an operator command with its output on pipes, for a test that reads (or closes) them itself. */
export function spawnParley(args: string[], env: Record<string, string> = {}): ChildProcess {
  return spawn(BIN, args, { env: withThisNode(env), stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Runs an operator command to completion; rejects with its output on a non-zero exit. */
export async function runParley(args: string[], env: Record<string, string> = {}): Promise<string> {
  const { stdout } = await promisify(execFile)(BIN, args, { env: withThisNode(env) });
  return stdout;
}

/** Runs a command that should fail; resolves to its exit code and output, and rejects if it succeeds. */
export async function runParleyFailing(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const ran = await promisify(execFile)(BIN, args, { env: withThisNode(env) }).then(
    () => undefined,
    (err: { code: number; stdout: string; stderr: string }) => ({ code: err.code, stdout: err.stdout, stderr: err.stderr }),
  );
  if (!ran) throw new Error(`parley ${args.join(' ')} succeeded`);
  return ran;
}
