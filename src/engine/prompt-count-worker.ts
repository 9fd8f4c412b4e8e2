// The prompt counter's own thread (engine/prompt-counter.ts): loads the
// GGUF's vocabulary and chat template, says so with the longest token's
// bytes, then answers each conversation it is sent with its token count.
import { parentPort, workerData } from 'node:worker_threads';
import { loadCountingPrompt, type CountedMessage } from './chat-prompt.js';

const port = parentPort!;
const counting = await loadCountingPrompt(workerData as string);
port.on('message', ({ id, messages }: { id: number; messages: CountedMessage[] }) => {
  try {
    port.postMessage({ id, tokens: counting.count(messages) });
  } catch (err) {
    port.postMessage({ id, error: (err as Error).message });
  }
});
port.postMessage({ ready: true, maxTokenBytes: counting.maxTokenBytes });
