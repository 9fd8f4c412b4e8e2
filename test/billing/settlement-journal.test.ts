// Settlements owed while Redis is away outlive the replica that owes them:
// kept in a journal on disk, replayed by the replica's next process (or by
// any replica once the journal is abandoned), and charged exactly once.
import { mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterEach, describe, expect, it } from 'vitest';
import { readBalance, type Settlement } from '../../src/billing/credit-ledger.js';
import { SettlementJournal } from '../../src/billing/settlement-journal.js';
import { readUsageEvents } from '../../src/billing/usage-events.js';
import { chatCalls, completionBody, replyJson, sleep, startFakeUpstream, until } from '../support/fake-upstream.js';
import { makeAccount, modelEntry, postChat, startTestGateway, TEST_KEY_SECRET } from '../support/gateway.js';
import { startParleyServe } from '../support/parley-process.js';
import { startTestRedis, type TestRedis } from '../support/redis.js';

const messages = [{ role: 'user' as const, content: 'hello' }];
const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'parley-journal-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const settlement = (requestId: string): Settlement => ({
  account: 'a1', keyId: 'k1', requestId, model: 'm', endpoint: 'e', outcome: 'complete',
  usage: { prompt_tokens: 10, completion_tokens: 2, cached_tokens: 0 }, cost: 14,
});

/** The journal a process left behind it, owing one settlement. */
function leftBehind(dir: string, host: string, pid: number, requestId: string): string {
  const journal = SettlementJournal.open(dir, host, pid);
  journal.record(settlement(requestId));
  journal.close();
  return journal.path;
}

describe('the settlement journal', () => {
  it('keeps what is owed until it lands, and empties itself once nothing is', () => {
    const journal = SettlementJournal.open(tempDir(), 'replica-a', 7);
    journal.record(settlement('r1'));
    journal.record(settlement('r2'));
    journal.landed('r1');
    expect(SettlementJournal.owedIn(journal.path).map((s) => s.requestId)).toEqual(['r2']);
    journal.landed('r2');
    expect(readFileSync(journal.path, 'utf8')).toBe('');
    journal.close();
  });

  it("hands what an earlier process of the same replica owed to the next, a line cut short by a crash aside", () => {
    const dir = tempDir();
    // A container restarted in its pod: the same host, and (as process 1) the same pid.
    const first = leftBehind(dir, 'replica-a', 1, 'r1');
    writeFileSync(first, '{"owed": {"requestId": "cut', { flag: 'a' });
    const next = SettlementJournal.open(dir, 'replica-a', 1);
    const [orphan] = next.orphans(60_000);
    expect(next.adopt(orphan).map((s) => s.requestId)).toEqual(['r1']);
    expect(SettlementJournal.owedIn(next.path).map((s) => s.requestId)).toEqual(['r1']);
    expect(readdirSync(dir)).toEqual(['replica-a.1.jsonl']);
    next.close();
  });

  it("adopts the journal of a process gone from the same host, and leaves a live one's alone", () => {
    const dir = tempDir();
    const live = SettlementJournal.open(dir, 'host', process.ppid);
    live.record(settlement('r-live'));
    const gone = leftBehind(dir, 'host', 2 ** 22 + 12345, 'r-gone');
    const journal = SettlementJournal.open(dir, 'host');
    expect(journal.orphans(60_000)).toEqual([gone]);
    live.close();
    journal.close();
  });

  it("leaves another replica's journal alone until no one has written it for longer than a hold lives", () => {
    const dir = tempDir();
    const gone = leftBehind(dir, 'replica-b', 7, 'r9');
    const journal = SettlementJournal.open(dir, 'replica-a', 7);
    expect(journal.orphans(60_000)).toEqual([]);
    const old = (Date.now() - 120_000) / 1000;
    utimesSync(gone, old, old);
    expect(journal.orphans(60_000)).toEqual([gone]);
    journal.close();
  });
});

describe('settlements owed when Redis is away', () => {
  const redises: TestRedis[] = [];
  afterEach(async () => {
    for (const r of redises.splice(0)) await r.stop();
  });

  it('land within a second of Redis answering again, however long the retries had been backing off', async () => {
    const upstream = await startFakeUpstream(async (_req, res) => {
      await sleep(200);
      replyJson(res, completionBody('x', { prompt_tokens: 1000, completion_tokens: 0 }));
    });
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    try {
      const start = (await readBalance(gw.redis.client, gw.account))!;
      const reply = postChat(gw, { model: 'm', messages });
      await until(async () => (await readBalance(gw.redis.client, gw.account))!.held > 0);
      await gw.redis.kill();
      expect((await reply).status).toBe(200);
      // Retries back off 0.2, 0.4, 0.8, 1.6 then 3.2 s: the next would be due some 2 s after Redis is back.
      await sleep(4_000);
      await gw.redis.restart();
      const back = Date.now();
      await until(async () => (await readBalance(gw.redis.client, gw.account).catch(() => start))!.granted !== start.granted, 3_000);
      expect(Date.now() - back).toBeLessThan(1_000);
      expect(await readBalance(gw.redis.client, gw.account)).toMatchObject({ granted: start.granted - 1000, held: 0 });
    } finally {
      await gw.close();
      await upstream.close();
    }
  });

  it('owe nothing for holds never sent: requests refused while Redis is away journal no release', async () => {
    const upstream = await startFakeUpstream((_req, res) => replyJson(res, completionBody('x', { prompt_tokens: 1, completion_tokens: 1 })));
    const gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
    try {
      // The key is known to the replica (its cache), so that requests reach their hold.
      expect((await postChat(gw, { model: 'm', messages })).status).toBe(200);
      await until(async () => (await readBalance(gw.redis.client, gw.account))!.held === 0 && gw.context.settlements.journaled === 0);
      await gw.redis.kill();
      await until(async () => gw.context.redis.status !== 'ready');
      for (let i = 0; i < 5; i++) expect((await postChat(gw, { model: 'm', messages })).status).toBe(503);
      expect(gw.context.settlements.journaled).toBe(0);
      await gw.redis.restart();
    } finally {
      await gw.close();
      await upstream.close();
    }
  });

  it('are charged exactly once after the replica that owed them is killed with -9 and started again', async () => {
    let release = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    // The replica reads the engine's load too (GET /metrics), which this upstream does not serve.
    const upstream = await startFakeUpstream(async (req, res) => {
      if (req.path === '/metrics') return replyJson(res, { error: 'no metrics here' }, 404);
      await gate;
      replyJson(res, completionBody('x', { prompt_tokens: 1000, completion_tokens: 0 }));
    });
    const redis = await startTestRedis();
    redises.push(redis);
    const dir = tempDir();
    const config = join(dir, 'routing.yaml');
    writeFileSync(config, stringify({ billing: { holdTtlMs: 1000 }, models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }));
    const args = ['--config', config, '--data-dir', join(dir, 'data')];
    const env = { REDIS_URL: redis.url, PARLEY_KEY_SECRET: TEST_KEY_SECRET };
    const caller = await makeAccount(redis, 10);
    const start = (await readBalance(redis.client, caller.account))!;
    let replica = await startParleyServe(args, env);
    try {
      const gateway = { url: replica.url, apiKey: caller.key };
      const replies = Array.from({ length: 3 }, () => postChat(gateway, { model: 'm', messages }));
      await until(async () => chatCalls(upstream) === 3);
      await redis.kill();
      release();
      expect((await Promise.all(replies)).map((r) => r.status)).toEqual([200, 200, 200]);
      const journalDir = join(dir, 'data', 'settlements');
      const owed = () => readdirSync(journalDir).flatMap((f) => SettlementJournal.owedIn(join(journalDir, f)));
      await until(async () => owed().length === 3);
      await replica.stop('SIGKILL');
      await redis.restart();
      // Its holds expire meanwhile; the replies are still owed, and charged once.
      await sleep(1_200);
      replica = await startParleyServe(args, env);
      await until(async () => (await readBalance(redis.client, caller.account))!.granted === start.granted - 3 * 1000, 5_000);
      await until(async () => owed().length === 0);
      await replica.stop('SIGTERM');
      replica = await startParleyServe(args, env);
      await sleep(500);
      expect(await readBalance(redis.client, caller.account)).toMatchObject({ granted: start.granted - 3 * 1000, held: 0 });
      const complete = [];
      for await (const e of readUsageEvents(redis.client, caller.account)) if (e.outcome === 'complete') complete.push(e);
      expect(complete).toHaveLength(3);
    } finally {
      await replica.stop('SIGKILL');
      await upstream.close();
    }
  });
});
