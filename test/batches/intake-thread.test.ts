// The batch intake thread reads one input at a time, the accounts waiting
// taking turns: a parse takes many times its input's bytes (a create of 32
// MiB of `{},` grew the process 1.0 GB), so inputs read at once from many
// accounts could take the replica's memory. An input whose client leaves
// while it waits is never read, and a thread that dies fails only the input
// it was reading. An account whose inputs took its time on the thread this
// minute is refused (429) until the minute ends: a refused create is free to
// send, and its parse takes a core.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { IntakeThread } from '../../src/batches/intake-thread.js';
import { lineBytes, type StoredLines } from '../../src/batches/stored-lines.js';
import { Cancelled } from '../../src/protocol/errors.js';

const TEST_WORKER = new URL('../support/intake-test-worker.mjs', import.meta.url);
const labelled = (label: string) => ({ kind: 'anthropic' as const, content: [Buffer.from(label)], maxLines: 1 });

/** What the test thread answered for an input: its label, how many it was reading at once, and how many it had been sent. */
async function answer(read: Promise<{ lines: StoredLines }>) {
  const { lines } = await read;
  const [label, atOnce, sent] = lines.ends.map((_, i) => lineBytes(lines, i).toString());
  return { label, atOnce: Number(atOnce), sent: Number(sent) };
}

describe('the batch intake thread', () => {
  it('reads one input at a time, each waiting account in its turn', async () => {
    const intake = new IntakeThread(TEST_WORKER);
    const done: string[] = [];
    const read = (account: string, label: string) => answer(intake.read(account, labelled(label))).then((a) => (done.push(a.label), a));
    const answers = await Promise.all([read('a', 'a1'), read('a', 'a2'), read('a', 'a3'), read('a', 'a4'), read('b', 'b1'), read('c', 'c1')]);
    expect(answers.map((a) => a.atOnce)).toEqual([1, 1, 1, 1, 1, 1]);
    // a1 went at once; then each account with inputs waiting takes one turn a round: a's second came before b and c did.
    expect(done).toEqual(['a1', 'a2', 'b1', 'c1', 'a3', 'a4']);
  });

  it('never reads an input whose client left while it waited', async () => {
    const intake = new IntakeThread(TEST_WORKER);
    const gone = new AbortController();
    const first = answer(intake.read('a', labelled('a1')));
    const left = intake.read('b', labelled('b1'), gone.signal);
    const last = answer(intake.read('c', labelled('c1')));
    gone.abort();
    await expect(left).rejects.toBeInstanceOf(Cancelled);
    expect(await first).toMatchObject({ label: 'a1', sent: 1 });
    expect(await last).toMatchObject({ label: 'c1', sent: 2 });
  });

  it('fails the input it was reading when the thread dies (a 500), and reads the next on a new thread', async () => {
    const intake = new IntakeThread(TEST_WORKER);
    const died = intake.read('a', labelled('exit'));
    const next = answer(intake.read('b', labelled('b1')));
    await expect(died).rejects.toMatchObject({ status: 500, type: 'server_error' });
    // Its count starts again at 1: the thread that read it is a new one.
    expect(await next).toMatchObject({ label: 'b1', sent: 1 });
  });

  it("refuses an account's inputs once they took its time this minute, with a 429 and when to come back, and reads the others'", async () => {
    // The counts start again each minute: the test keeps clear of a minute's end.
    if (60_000 - (Date.now() % 60_000) < 2_000) await sleep(2_000);
    // Each input takes the test thread 20 ms or more (more on a busy machine): 50 ms a minute is three of them at most.
    const intake = new IntakeThread(TEST_WORKER, 50);
    // Started by another account's input: a thread's start is counted to the input it starts with.
    await intake.read('w', labelled('w1'));
    const settled = await Promise.allSettled([1, 2, 3, 4, 5].map((i) => intake.read('a', labelled(`a${i}`))));
    const read = settled.filter((s) => s.status === 'fulfilled').length;
    expect(read).toBeGreaterThanOrEqual(1);
    expect(read).toBeLessThanOrEqual(3);
    // Those read came first; the rest, waiting while the account's time ran out, were refused at their turn.
    expect(settled.slice(0, read).every((s) => s.status === 'fulfilled')).toBe(true);
    for (const s of settled.slice(read)) expect(s).toMatchObject({ status: 'rejected', reason: { status: 429, type: 'rate_limit_error', code: 'batch_intake_time' } });
    const refused = await intake.read('a', labelled('a6')).catch((err) => err);
    expect(refused).toMatchObject({ status: 429, headers: { 'retry-after': expect.stringMatching(/^\d+$/) } });
    expect((await answer(intake.read('b', labelled('b1')))).label).toBe('b1');
  });
});
