// Reading a request body on a real connection.
import { createServer, request, type ClientRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { cutOffWhenStalled, readJsonBody, sendDownload } from '../../src/protocol/http-io.js';
import { sleep } from '../support/fake-upstream.js';

/** The server's side of one request whose client sends `body` (of `declared` bytes) and then leaves. */
async function requestWhoseClientLeft(body: string, declared: number): Promise<IncomingMessage> {
  const server = createServer();
  const arrived = new Promise<IncomingMessage>((resolve) => server.once('request', resolve));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = request({ port: (server.address() as AddressInfo).port, method: 'POST', headers: { 'content-type': 'application/json', 'content-length': declared } });
  client.on('error', () => {});
  client.write(body);
  const req = await arrived;
  client.destroy();
  await new Promise((resolve) => req.once('close', resolve));
  server.close();
  return req;
}

describe('readJsonBody', () => {
  it('gives up at once on a request whose client left before its body was read, whole or not', async () => {
    for (const [body, declared] of [['{"a":1}', 7], ['{"a":', 100]] as const) {
      const req = await requestWhoseClientLeft(body, declared);
      const outcome = await Promise.race([readJsonBody(req, 1_000_000).then(() => 'read', (err) => err.name), sleep(1_000).then(() => 'still waiting')]);
      expect(outcome).toBe('AbortError');
    }
  });

  it('gives up, as cancelled, on a client that leaves half-way through its body while it is being read', async () => {
    const server = createServer();
    const arrived = new Promise<IncomingMessage>((resolve) => server.once('request', resolve));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const client = request({ port: (server.address() as AddressInfo).port, method: 'POST', headers: { 'content-type': 'application/json', 'content-length': 100 } });
    client.on('error', () => {});
    client.write('{"a":');
    const req = await arrived;
    const reading = readJsonBody(req, 1_000_000).then(() => 'read', (err: Error) => err.name);
    await sleep(50);
    client.destroy();
    const outcome = await Promise.race([reading, sleep(1_000).then(() => 'still waiting')]);
    server.close();
    expect(outcome).toBe('AbortError');
  });
});

/** Starts `server` and sends it a GET: the request, and its reply once its head has come. */
async function getFrom(server: Server): Promise<{ client: ClientRequest; reply: IncomingMessage }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = request({ port: (server.address() as AddressInfo).port });
  client.on('error', () => {});
  client.end();
  const reply = await new Promise<IncomingMessage>((resolve) => client.once('response', resolve));
  reply.on('error', () => {});
  return { client, reply };
}

describe('sendDownload', () => {
  /** An endless download of 64 KiB parts to a client that reads nothing, with `sendTimeoutMs`; `leave` ends the client, `closed` is the server's side closing. */
  async function stalledDownload(sendTimeoutMs: number, run: (d: { partsRead: () => number; stopped: () => boolean; leave: () => void; closed: Promise<unknown> }) => Promise<void>) {
    let partsRead = 0;
    let stopped = false;
    async function* parts() {
      try {
        for (;;) {
          partsRead++;
          yield Buffer.alloc(64 * 1024, 120);
        }
      } finally {
        stopped = true;
      }
    }
    let markClosed: (v: unknown) => void = () => {};
    const closed = new Promise((resolve) => (markClosed = resolve));
    const server = createServer((_req, res) => {
      res.once('close', markClosed);
      void sendDownload(res, { 'content-type': 'application/octet-stream' }, parts(), sendTimeoutMs);
    });
    try {
      const { client, reply } = await getFrom(server);
      reply.pause();
      await run({ partsRead: () => partsRead, stopped: () => stopped, leave: () => client.destroy(), closed });
    } finally {
      server.close();
    }
  }

  it('stops reading its parts once a client that stopped reading has left', async () => {
    await stalledDownload(60_000, async ({ partsRead, stopped, leave }) => {
      await sleep(300);
      expect(partsRead()).toBeGreaterThan(1);
      const readBeforeLeaving = partsRead();
      leave();
      for (let i = 0; i < 50 && !stopped(); i++) await sleep(20);
      expect(stopped()).toBe(true);
      expect(partsRead()).toBe(readBeforeLeaving);
    });
  });

  it('closes the connection of a client that takes nothing for sendTimeoutMs, and stops reading its parts', async () => {
    await stalledDownload(500, async ({ partsRead, stopped, closed }) => {
      const started = Date.now();
      await closed;
      expect(Date.now() - started).toBeGreaterThanOrEqual(400);
      for (let i = 0; i < 50 && !stopped(); i++) await sleep(20);
      expect(stopped()).toBe(true);
      const read = partsRead();
      await sleep(100);
      expect(partsRead()).toBe(read);
    });
  });
});

describe('cutOffWhenStalled', () => {
  /** A 12 MB reply written at once, more than the sockets between hold, read by `read`; resolves with the bytes the client got. */
  async function wholeReply(read: (reply: IncomingMessage) => Promise<void>): Promise<number> {
    const size = 12 * 1024 * 1024;
    const server = createServer((_req, res) => {
      res.end(Buffer.alloc(size, 120));
      cutOffWhenStalled(res, 300);
    });
    try {
      const { reply } = await getFrom(server);
      let received = 0;
      reply.on('data', (d: Buffer) => (received += d.length));
      await read(reply);
      return received;
    } finally {
      server.closeAllConnections();
      server.close();
    }
  }

  it('drops the connection of a client that takes nothing for the interval', async () => {
    const received = await wholeReply(async (reply) => {
      reply.pause();
      await sleep(1_000);
      const ended = new Promise((resolve) => reply.once('close', resolve));
      reply.resume();
      await ended;
    });
    expect(received).toBeLessThan(12 * 1024 * 1024);
  });

  it('leaves a client that takes some in each interval to read it all, however slowly', async () => {
    const received = await wholeReply(async (reply) => {
      reply.on('data', () => {
        reply.pause();
        setTimeout(() => reply.resume(), 5);
      });
      await new Promise((resolve) => reply.once('end', resolve));
    });
    expect(received).toBe(12 * 1024 * 1024);
  });
});
