// Binding an HTTP server to its address, for the gateway and the local
// engine alike: a refusal is a one-line message at start-up, not a crash.
import type { Server } from 'node:http';

/** The address cannot be listened on: its message is the whole story, for one line at start-up. */
export class CannotListen extends Error {}

/** Listens, or fails with a message that names the address, rather than with an unhandled error event. */
export function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException) => {
      const why = err.code === 'EADDRINUSE' ? 'another process is listening there; choose another port' : err.message;
      reject(new CannotListen(`cannot listen on ${host}:${port}: ${why}`));
    };
    server.once('error', failed);
    server.listen(port, host, () => {
      server.off('error', failed);
      resolve();
    });
  });
}
