// One llama.cpp binding per process, from the prebuilt binaries that ship in
// the node-llama-cpp package: never a download, never a source build.
import { getLlama, LlamaLogLevel, type Llama } from 'node-llama-cpp';

let llama: Promise<Llama> | undefined;

export function localLlama(): Promise<Llama> {
  llama ??= getLlama({ build: 'never', usePrebuiltBinaries: true, skipDownload: true, progressLogs: false, logLevel: LlamaLogLevel.error });
  return llama;
}
