// A batch intake thread for tests (test/batches/intake-thread.test.ts): each
// input's bytes (its parts joined) are a label; it answers after 20 ms with
// the label, how many inputs it was reading at once, and how many it has been
// sent; it exits at the label 'exit', as a thread that fails does.
import { parentPort } from 'node:worker_threads';

let reading = 0;
let sent = 0;
parentPort.on('message', (input) => {
  const label = Buffer.concat(input.content).toString();
  if (label === 'exit') process.exit(3);
  reading++;
  sent++;
  const atOnce = reading;
  setTimeout(() => {
    reading--;
    const texts = [label, String(atOnce), String(sent)];
    const ends = texts.map((_, i) => Buffer.byteLength(texts.slice(0, i + 1).join('')));
    parentPort.postMessage({ read: { lines: { bytes: Buffer.from(texts.join('')), ends }, order: [], models: [], problems: [] } });
  }, 20);
});
