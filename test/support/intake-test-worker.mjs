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
    parentPort.postMessage({ read: { texts: [label, String(atOnce), String(sent)], bytes: 0, order: [], models: [], problems: [] } });
  }, 20);
});
