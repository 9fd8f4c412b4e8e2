// The intake thread's own code (batches/intake-thread.ts): reads each batch
// input it is sent, one at a time, and answers with what is stored of it, or
// its 400.
import { parentPort } from 'node:worker_threads';
import { ApiError } from '../protocol/errors.js';
import { readBatchInput, type BatchInput } from './input-reading.js';

const port = parentPort!;
port.on('message', (input: BatchInput) => {
  try {
    const read = readBatchInput(input);
    if (read instanceof ApiError) port.postMessage({ refusal: { status: read.status, type: read.type, message: read.message, code: read.code, param: read.param } });
    // Its lines' bytes handed back, not copied.
    else port.postMessage({ read }, [read.lines.bytes.buffer as ArrayBuffer]);
  } catch (err) {
    port.postMessage({ failure: (err as Error).message });
  }
});
