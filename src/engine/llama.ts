// One llama.cpp binding per process, from the prebuilt binaries that ship in
// the node-llama-cpp package: never a download, never a source build.
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { getLlama, LlamaLogLevel, type Llama } from 'node-llama-cpp';

let llama: Promise<Llama> | undefined;

export function localLlama(): Promise<Llama> {
  llama ??= getLlama({ build: 'never', usePrebuiltBinaries: true, skipDownload: true, progressLogs: false, logLevel: LlamaLogLevel.error });
  return llama;
}

/** Below this size a model's work per token is shorter than what threads cost to meet at every layer. */
const SMALL_MODEL_BYTES = 256 * 1024 * 1024;

/**
 * CPU threads for evaluating a model of `modelBytes` when none are asked
 * for. node-llama-cpp's own default on a machine without a GPU is two per
 * core; on a 2-core VM those threads, each waiting on the others at every
 * layer, made replies 100 to 1,300 times slower than one thread
 * (bench/engine-threads.mjs, in git history). So one per core this process may use, and one
 * in all for a small model, whose work per token is shorter than what
 * threads cost to meet: there one thread was twice as quick as two at 133 MB
 * and 64 times on Parley's own model, where two were 1.1 times quicker at
 * 531 MB.
 */
export function defaultThreads(llama: Llama, modelBytes: number): number {
  return modelBytes < SMALL_MODEL_BYTES ? 1 : coresWithinQuota(Math.min(llama.cpuMathCores, availableParallelism()), cgroupCpuMax());
}

/**
 * `cores`, or fewer when the cgroup's CPU quota (`cpu.max`, "QUOTA PERIOD"
 * or "max PERIOD") allows fewer: a container limited to 2 CPUs on a 64-core
 * node sees 64 cores, and threads past its quota stall just as those past
 * the cores do.
 */
export function coresWithinQuota(cores: number, cpuMax: string | undefined): number {
  const [quota, period] = cpuMax?.trim().split(/\s+/) ?? [];
  if (!quota || quota === 'max' || !(Number(period) > 0)) return cores;
  return Math.max(1, Math.min(cores, Math.floor(Number(quota) / Number(period))));
}

function cgroupCpuMax(): string | undefined {
  try {
    return readFileSync('/sys/fs/cgroup/cpu.max', 'utf8');
  } catch {
    return undefined; // no cgroup v2 CPU limit here
  }
}
