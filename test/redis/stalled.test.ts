// A Redis whose connection stays open but which answers nothing (stopped,
// blocked by a slow command, behind a network that drops packets): a
// request fails closed with a 503 once GATEWAY_COMMAND_TIMEOUT_MS has passed,
// rather than hanging for as long as its client waits, charges nothing and
// calls no upstream; the hold Redis takes late is released; and the replica
// serves again once Redis answers. A wait for replicas too long to fit in
// that timeout is refused at the start.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { readBalance } from '../../src/billing/credit-ledger.js';
import { GATEWAY_COMMAND_TIMEOUT_MS } from '../../src/redis/connection.js';
import { answering, chatCalls, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway, type TestGateway } from '../support/gateway.js';

let upstream: FakeUpstream;
let gateway: TestGateway;
beforeAll(async () => {
  upstream = await startFakeUpstream(answering({ prompt_tokens: 3, completion_tokens: 1 }));
  gateway = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] });
});
afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
});

describe('a Redis that stops answering', () => {
  it('fails a request closed within the command timeout, charges nothing, releases the hold it takes late, and serves once it answers', async () => {
    const chat = () => postChat(gateway, { model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    expect((await chat()).status).toBe(200);
    const { client } = gateway.redis;
    // The first chat's settlement lands a moment after its reply.
    await expect.poll(async () => (await readBalance(client, gateway.account))!.held).toBe(0);
    const before = await readBalance(client, gateway.account);
    const calls = chatCalls(upstream);
    const pid = Number(/^process_id:(\d+)/m.exec(await client.info('server'))![1]);
    const warn = vi.spyOn(console, 'warn');
    process.kill(pid, 'SIGSTOP');
    try {
      const started = performance.now();
      const refused = await chat();
      const waited = performance.now() - started;
      expect(refused.status).toBe(503);
      expect((await refused.json()).error.type).toBe('service_unavailable');
      expect(waited).toBeGreaterThanOrEqual(GATEWAY_COMMAND_TIMEOUT_MS - 50);
      expect(waited).toBeLessThan(GATEWAY_COMMAND_TIMEOUT_MS + 2_000);
      expect(warn.mock.calls.some(([line]) => String(line).includes('Command timed out'))).toBe(true);
    } finally {
      process.kill(pid, 'SIGCONT');
      warn.mockRestore();
    }
    expect(chatCalls(upstream)).toBe(calls);
    // Redis ran the hold once it went on, and then its release: the balance is as it was, nothing held.
    await expect.poll(() => readBalance(client, gateway.account), { timeout: 10_000, interval: 200 }).toEqual(before);
    expect((await chat()).status).toBe(200);
  });
});

describe('a wait for replicas', () => {
  it('longer than half the command timeout is refused at the start, where every durable write would otherwise be given up on', async () => {
    const before = process.env.REDIS_WAIT_TIMEOUT_MS;
    process.env.REDIS_WAIT_TIMEOUT_MS = String(GATEWAY_COMMAND_TIMEOUT_MS / 2 + 1);
    try {
      await expect(startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url }])] }, { redis: gateway.redis })).rejects.toThrow('REDIS_WAIT_TIMEOUT_MS');
    } finally {
      if (before === undefined) delete process.env.REDIS_WAIT_TIMEOUT_MS;
      else process.env.REDIS_WAIT_TIMEOUT_MS = before;
    }
  });
});
