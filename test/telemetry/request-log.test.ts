import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const requestLog = fileURLToPath(new URL('../../dist/telemetry/request-log.js', import.meta.url));

// A process whose stdout is a pipe: it writes `count` request log lines (ids <tag>-<n>) when told (once its stdout
// has drained, where asked), then says what its stdout has queued and how many lines it dropped.
const child = `
const log = await import(${JSON.stringify(requestLog)});
process.on('message', async ({ tag, count, drained }) => {
  if (drained && process.stdout.writableLength > 0) await new Promise((r) => process.stdout.once('drain', r));
  for (let n = 0; n < count; n++) log.writeRequestLog({ id: tag + '-' + n, attempts: 1, account: 'acct_1', api: 'chat', model: 'm' }, 200, undefined, 0.01);
  log.flushRequestLog();
  process.send({ queued: process.stdout.writableLength, dropped: log.requestLogLinesDropped?.() ?? 0 });
});
process.send('ready');
`;

describe('the request log', () => {
  it("keeps at most 16 MiB for a reader that stalls, dropping and counting the rest, and writes again once it reads", async () => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', child], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
    try {
      const ask = async (tag: string, count: number, drained = false) => {
        p.send({ tag, count, drained });
        return (await once(p, 'message'))[0] as { queued: number; dropped: number };
      };
      await once(p, 'message');
      // About 24 MiB of lines, stdout unread: past the bound, lines are dropped, not queued.
      const stalled = await ask('stalled', 120_000);
      expect(stalled.queued).toBeLessThan(16 * 1024 * 1024 + 128 * 1024);
      expect(stalled.dropped).toBeGreaterThan(10_000);
      // Read again: once the queue has drained, new lines are written.
      let read = '';
      p.stdout!.setEncoding('utf8').on('data', (d: string) => (read = (read + d).slice(-1_000_000)));
      const after = await ask('after', 10, true);
      expect(after.dropped).toBe(stalled.dropped);
      for (let i = 0; i < 100 && !read.includes('"request_id":"after-9"'); i++) await new Promise((r) => setTimeout(r, 50));
      expect(read).toContain('"request_id":"after-0"');
      expect(read).toContain('"request_id":"after-9"');
    } finally {
      p.kill();
    }
  });
});
