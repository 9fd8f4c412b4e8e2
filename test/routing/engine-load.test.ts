// Routing on what the engines report: their metrics text read as vLLM,
// SGLang and llama.cpp's server serve it, read once per interval for a
// fleet of three replicas, work that reaches an engine another way steering
// new requests elsewhere, a read that fails or hangs failing no request,
// flex held back while an engine has a queue of its own, and bounded by
// what the engine has shown it runs, and a queue weighed by how long requests
// hold a slot there (the engine's run time, else the whole fleet's holds).
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEngineLoad } from '../../src/upstream/engine-load.js';
import { DIALECTS } from '../../src/upstream/dialects/index.js';
import { LeastLoadPolicy } from '../../src/routing/policies/least-load.js';
import { PrefixAffinityPolicy } from '../../src/routing/policies/prefix-affinity.js';
import { EndpointState, Slot } from '../../src/routing/endpoint-state.js';
import { FleetSlots } from '../../src/routing/fleet-slots.js';
import { connectRedis } from '../../src/redis/connection.js';
import { startTestRedis } from '../support/redis.js';
import { completionBody, replyJson, sleep, type ReceivedRequest, type Script } from '../support/fake-upstream.js';
import { asAdmin, modelEntry, postChat, startFleetOn, startGatewayOn, type FleetOnUpstreams, type TestGateway } from '../support/gateway.js';

const VLLM_TEXT = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.62
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.41
# HELP vllm:num_requests_waiting_by_reason Not a gauge routing reads.
vllm:num_requests_waiting_by_reason{reason="capacity"} 9.0
`;

const SGLANG_TEXT = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Qwen/Qwen3-8B",engine_type="unified",tp_rank="0"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="Qwen/Qwen3-8B",engine_type="unified",tp_rank="0"} 4.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="Qwen/Qwen3-8B",engine_type="unified",tp_rank="0"} 0.93
`;

const LLAMACPP_TEXT = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 33065
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 5
`;

describe('reading an engine’s metrics text', () => {
  it('sums running and waiting over a server’s engines and keeps the fullest KV cache (vLLM)', () => {
    expect(readEngineLoad(DIALECTS.vllm.engineLoad!, VLLM_TEXT)).toEqual({ running: 12, waiting: 3, kvCacheUse: 0.62 });
  });

  it('sums vLLM’s run-time histogram over its engines: requests finished and the seconds they ran', () => {
    const histogram = `# HELP vllm:request_inference_time_seconds Histogram of time spent in RUNNING phase for request.
# TYPE vllm:request_inference_time_seconds histogram
vllm:request_inference_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 40.0
vllm:request_inference_time_seconds_count{engine="0",model_name="m"} 40.0
vllm:request_inference_time_seconds_sum{engine="0",model_name="m"} 61.5
vllm:request_inference_time_seconds_count{engine="1",model_name="m"} 10.0
vllm:request_inference_time_seconds_sum{engine="1",model_name="m"} 8.5
`;
    expect(readEngineLoad(DIALECTS.vllm.engineLoad!, VLLM_TEXT + histogram)).toEqual({ running: 12, waiting: 3, kvCacheUse: 0.62, ran: { requests: 50, seconds: 70 } });
  });

  it('reads vLLM’s KV gauge by its name before 0.10 too', () => {
    const old = VLLM_TEXT.replaceAll('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc');
    expect(readEngineLoad(DIALECTS.vllm.engineLoad!, old)?.kvCacheUse).toBe(0.62);
  });

  it('reads SGLang’s queue and token usage, and llama.cpp’s slots busy and requests deferred (Parley’s engine serves the same)', () => {
    expect(readEngineLoad(DIALECTS.sglang.engineLoad!, SGLANG_TEXT)).toEqual({ running: 12, waiting: 4, kvCacheUse: 0.93 });
    expect(readEngineLoad(DIALECTS.llamacpp.engineLoad!, LLAMACPP_TEXT)).toEqual({ running: 2, waiting: 5 });
    expect(DIALECTS['parley-engine'].engineLoad).toBe(DIALECTS.llamacpp.engineLoad);
  });

  it('finds nothing where the gauges are missing or not numbers, and nothing to read for a hosted API', () => {
    expect(readEngineLoad(DIALECTS.vllm.engineLoad!, LLAMACPP_TEXT)).toBeUndefined();
    expect(readEngineLoad(DIALECTS.llamacpp.engineLoad!, 'llamacpp:requests_processing NaN\nllamacpp:requests_deferred 1\n')).toBeUndefined();
    expect(readEngineLoad(DIALECTS.llamacpp.engineLoad!, '<html>not metrics</html>')).toBeUndefined();
    expect(DIALECTS.openai.engineLoad).toBeUndefined();
    expect(DIALECTS.deepseek.engineLoad).toBeUndefined();
  });

  it('reads the metrics at the server root, beside /v1', () => {
    expect(DIALECTS.vllm.engineLoad!.url('http://vllm-0:8000/v1')).toBe('http://vllm-0:8000/metrics');
  });
});

describe('scoring on the engine’s report', () => {
  const candidates = (kv: number[]) => kv.map((kvCacheUse, i) => ({ name: `e${i}`, load: i, weight: 1, kvCacheUse }));

  it('least load puts an engine whose KV cache is nearly full last, however few requests it has', () => {
    expect(new LeastLoadPolicy().order(candidates([0.95, 0.3, 0.5])).map((c) => c.name)).toEqual(['e1', 'e2', 'e0']);
  });

  const settings = { loadFactor: 1.5, maxImbalance: 4, placementSlack: 0.25, prefillTokensPerSecond: 10_000 };

  it('prefix affinity keeps a key home while its queue costs less than reading the prompt again elsewhere, and moves it when not', () => {
    const idle = [0, 1, 2].map((i) => ({ name: `e${i}`, load: 4, weight: 1, capacity: 8, heldMs: 4000 }));
    const home = new PrefixAffinityPolicy(settings).order(idle, { key: 'session-2' })[0].name;
    // 8 in flight at home fills it: one slot must free first, a wait of 4000 / 8 = 500 ms.
    // Within the load bound (the mean plus 4) either way, so only the cost moves the key.
    const full = (extra: object = {}) => idle.map((c) => (c.name === home ? { ...c, load: 8, engineQueue: 1, ...extra } : c));
    // Each on a policy of its own, which has not moved the key before.
    const choice = (candidates: typeof idle, promptTokens: number) => new PrefixAffinityPolicy(settings).order(candidates, { key: 'session-2', promptTokens })[0].name;
    expect(choice(full(), 2_000)).not.toBe(home); // reading 2,000 tokens again: 200 ms
    expect(choice(full(), 20_000)).toBe(home); // 2,000 ms
    expect(choice(full({ heldMs: 400 }), 2_000)).toBe(home); // short replies: 50 ms
    expect(choice(full({ heldMs: undefined }), 20_000)).not.toBe(home); // no request held a slot yet: the wait is unknown
    expect(choice(idle.map((c) => (c.name === home ? { ...c, load: 6, engineQueue: 1 } : c)), 2_000)).toBe(home); // room at home
    expect(choice(full({ capacity: undefined, engineQueue: 2 }), 20_000)).not.toBe(home);
    // Where every engine would queue it, it stays home.
    expect(choice(idle.map((c) => ({ ...c, load: 8, engineQueue: 1 })), 2_000)).toBe(home);
  });

  it('prefix affinity keeps a key where it was sent away to, its prompt now cached there, while that costs least', () => {
    const idle = [0, 1, 2].map((i) => ({ name: `e${i}`, load: 4, weight: 1, capacity: 8, heldMs: 4000 }));
    const [moving, other] = [new PrefixAffinityPolicy(settings), new PrefixAffinityPolicy(settings)];
    const home = moving.order(idle, { key: 'session-3' })[0].name;
    const busy = idle.map((c) => (c.name === home ? { ...c, load: 8, engineQueue: 1 } : c));
    const turn = (policy: PrefixAffinityPolicy, candidates: typeof idle, promptTokens: number) => policy.order(candidates, { key: 'session-3', promptTokens })[0].name;
    // A 2,000-token turn leaves the busy home (a 500 ms queue against 200 ms of reading).
    const away = turn(moving, busy, 2_000);
    expect(away).not.toBe(home);
    // Its conversation grows past the point where the home's queue costs less than reading all of it again. The home
    // has only its first turns cached, so it stays where it went; weighing the home as the key's cache sent it back,
    // as the replica that did not send it away still does.
    expect(turn(moving, busy, 20_000)).toBe(away);
    expect(turn(other, busy, 20_000)).toBe(home);
    // The home frees: reading 22,000 tokens again there costs more than staying.
    expect(turn(moving, idle, 22_000)).toBe(away);
    // Where it went fills up (a 1,000 ms queue): a short prompt goes where reading it costs least, the home first in
    // its order, and is the home's again after.
    const awayBusy = idle.map((c) => (c.name === away ? { ...c, load: 9, engineQueue: 2 } : c));
    expect(turn(moving, awayBusy, 2_000)).toBe(home);
    expect(turn(moving, idle, 2_000)).toBe(home);
  });

  it('prefix affinity moves a key off a KV-full home, and keeps it home when every engine is full', () => {
    const policy = new PrefixAffinityPolicy(settings);
    const idle = [0, 1, 2].map((i) => ({ name: `e${i}`, load: 0, weight: 1, kvCacheUse: 0.2 }));
    const home = policy.order(idle, { key: 'session-1' })[0].name;
    const homeFull = idle.map((c) => (c.name === home ? { ...c, kvCacheUse: 0.97 } : c));
    expect(policy.order(homeFull, { key: 'session-1' })[0].name).not.toBe(home);
    expect(new PrefixAffinityPolicy(settings).order(idle.map((c) => ({ ...c, kvCacheUse: 0.97 })), { key: 'session-1' })[0].name).toBe(home);
  });
});

describe('flex beside an engine’s own queue', () => {
  const BREAKER = { failureThreshold: 3, failureRate: 0.5, windowMs: 10_000, minCallers: 1, openMs: 1000, probe: { path: '/models', intervalMs: 0, timeoutMs: 100 } };

  it('holds flex back while the engine reports requests waiting inside it, and lets the other tiers through', async () => {
    const state = new EndpointState('e', { maxConcurrent: 8, maxQueue: 8, accountQueueShare: 1, flexFillsAll: false }, BREAKER);
    let waiting = 3;
    state.engineWaiting = () => waiting;
    expect(await state.tryAcquire('flex')).toBeUndefined();
    expect(await state.tryAcquire('default')).toBeInstanceOf(Slot);
    waiting = 0;
    expect(await state.tryAcquire('flex')).toBeInstanceOf(Slot);
  });

  it('lets flex fill every slot of an engine that schedules by priority, its queue or not', async () => {
    const state = new EndpointState('e', { maxConcurrent: 4, maxQueue: 8, accountQueueShare: 1, flexFillsAll: true }, BREAKER);
    state.engineWaiting = () => 2;
    for (let i = 0; i < 4; i++) expect(await state.tryAcquire('flex')).toBeInstanceOf(Slot);
    expect(await state.tryAcquire('flex')).toBeUndefined();
  });
});

describe('capacity from the engine', () => {
  const BREAKER = { failureThreshold: 3, failureRate: 0.5, windowMs: 10_000, minCallers: 1, openMs: 1000, probe: { path: '/models', intervalMs: 0, timeoutMs: 100 } };
  const LIMITS = { maxConcurrent: 256, maxQueue: 64, accountQueueShare: 1, flexFillsAll: false };
  const admitted = async (state: EndpointState, tier: 'default' | 'flex', tries: number) => {
    let n = 0;
    for (let i = 0; i < tries; i++) if (await state.tryAcquire(tier)) n++;
    return n;
  };

  it('sends flex no more than the engine runs, less its reserve; the other tiers, up to maxConcurrent', async () => {
    const unknown = new EndpointState('e', LIMITS, BREAKER);
    expect(await admitted(unknown, 'flex', 20)).toBe(20);
    const shown = new EndpointState('e', LIMITS, BREAKER);
    shown.engineCapacity = () => 8;
    // Flex keeps its reserve of what the engine runs (one of 8), and none of it waits in the engine's queue.
    expect(await admitted(shown, 'flex', 20)).toBe(7);
    expect(shown.snapshot().flexMaxConcurrent).toBe(8);
    expect(await admitted(shown, 'default', 20)).toBe(20);
  });

  it('keeps the operator’s limit where it is lower, and still lets flex move where work from elsewhere fills the engine', async () => {
    const capped = new EndpointState('e', { ...LIMITS, maxConcurrent: 4 }, BREAKER);
    capped.engineCapacity = () => 8;
    expect(await admitted(capped, 'flex', 20)).toBe(3);
    const taken = new EndpointState('e', LIMITS, BREAKER);
    taken.engineCapacity = () => 8 - 36;
    expect(await admitted(taken, 'flex', 20)).toBe(1);
  });

  it('holds the bound for the fleet: two replicas on one Redis send no more flex between them', async () => {
    const server = await startTestRedis();
    const redis = await connectRedis({ kind: 'server', url: server.url });
    const slots = [new FleetSlots(redis), new FleetSlots(redis)];
    try {
      const [a, b] = slots.map((s) => {
        const state = new EndpointState('shared', LIMITS, BREAKER, s);
        state.engineCapacity = () => 8;
        return state;
      });
      expect(await admitted(a, 'flex', 4)).toBe(4);
      expect(await admitted(b, 'flex', 10)).toBe(3);
    } finally {
      await Promise.all(slots.map((s) => s.close()));
      redis.disconnect();
      await server.stop();
    }
  });
});

/** A scripted vLLM: chat replies after `replyMs`, and /metrics with what `load()` says, counting the reads. */
function scriptedVllm(
  load: () => { running: number; waiting: number; kv: number; ran?: { requests: number; seconds: number } },
  metrics: 'ok' | 'error' | 'hang' | 'endless' = 'ok',
  replyMs: number | ((req: ReceivedRequest) => number) = 5,
) {
  const counts = { metricsReads: 0, chats: 0 };
  const script = async (req: ReceivedRequest, res: ServerResponse) => {
    if (req.path === '/metrics') {
      counts.metricsReads++;
      if (metrics === 'error') return replyJson(res, { error: 'metrics are off' }, 500);
      if (metrics === 'hang') return;
      if (metrics === 'endless') {
        // Gauges the gateway never gets to: comment lines, 1 MiB a write, until the gateway stops reading.
        res.writeHead(200, { 'content-type': 'text/plain' });
        const line = `# ${'x'.repeat(1023)}\n`.repeat(1024);
        while (!res.destroyed && res.write(line)) await sleep(0);
        return;
      }
      const l = load();
      res.writeHead(200, { 'content-type': 'text/plain' });
      const ran = l.ran ? `vllm:request_inference_time_seconds_count{engine="0",model_name="m"} ${l.ran.requests}.0\nvllm:request_inference_time_seconds_sum{engine="0",model_name="m"} ${l.ran.seconds}\n` : '';
      res.end(`vllm:num_requests_running{engine="0",model_name="m"} ${l.running}.0\nvllm:num_requests_waiting{engine="0",model_name="m"} ${l.waiting}.0\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} ${l.kv}\n${ran}`);
      return;
    }
    if (req.path.endsWith('/models')) return replyJson(res, { object: 'list', data: [] });
    counts.chats++;
    await sleep(typeof replyMs === 'number' ? replyMs : replyMs(req));
    replyJson(res, completionBody('ok', { prompt_tokens: 5, completion_tokens: 1 }));
  };
  return { counts, script };
}

interface EndpointsView {
  data: { endpoints: { url: string; flexMaxConcurrent: number; engine: { source: string; reason?: string; load?: { waiting: number }; external: number; capacity?: number; runMs?: number }; routingLoad: number; fleetHeldMs?: number }[] }[];
}
const endpointsView = async (gw: TestGateway) => (await (await fetch(`${gw.url}/admin/v1/endpoints`, { headers: asAdmin })).json()) as EndpointsView;

describe('three replicas reading two engines', () => {
  const INTERVAL_MS = 200;
  const busy = scriptedVllm(() => ({ running: 8, waiting: 30, kv: 0.8 }));
  const idle = scriptedVllm(() => ({ running: 0, waiting: 0, kv: 0.1 }));
  let running: FleetOnUpstreams;
  let replicas: TestGateway[];
  const config = ([a, b]: string[]) => ({
    gateway: { engineLoad: { intervalMs: INTERVAL_MS, timeoutMs: 150 } },
    models: [modelEntry('m', [{ kind: 'vllm', url: a }, { kind: 'vllm', url: b }])],
  });

  beforeAll(async () => {
    running = await startFleetOn([busy.script, idle.script], config, 3);
    replicas = running.replicas;
  });
  afterAll(() => running.close());

  it('reads each engine about once per interval for the whole fleet, and every replica sees the same report', async () => {
    const before = busy.counts.metricsReads;
    await sleep(10 * INTERVAL_MS);
    const reads = busy.counts.metricsReads - before;
    // One replica reading alone would make 10; three, each on its own, 30.
    expect(reads).toBeGreaterThanOrEqual(6);
    expect(reads).toBeLessThanOrEqual(14);
    for (const gw of replicas) {
      const [model] = (await endpointsView(gw)).data;
      const [b, i] = model.endpoints;
      // 8 running and 30 waiting, none of them the fleet's: 38 from elsewhere, less the 2 not told apart from the fleet's lag.
      expect(b.engine).toMatchObject({ source: 'engine', load: { waiting: 30 }, external: 36, capacity: 8 });
      expect(b.routingLoad).toBe(36);
      // The fleet sends it flex one at a time: all it runs is work from elsewhere.
      expect(b.flexMaxConcurrent).toBe(1);
      expect(i.engine).toMatchObject({ source: 'engine', load: { waiting: 0 }, external: 0 });
    }
  });

  it('sends new requests away from the engine whose queue comes from elsewhere, from every replica', async () => {
    const before = { busy: busy.counts.chats, idle: idle.counts.chats };
    for (let i = 0; i < 30; i++) {
      const res = await postChat(replicas[i % 3], { model: 'm', messages: [{ role: 'user', content: `question ${i} from tenant ${i % 7}` }] });
      expect(res.status).toBe(200);
    }
    const toBusy = busy.counts.chats - before.busy;
    expect(toBusy + idle.counts.chats - before.idle).toBe(30);
    expect(toBusy).toBeLessThanOrEqual(2);
  });

  it('says on /metrics what each engine reported', async () => {
    const text = await (await fetch(`${replicas[1].url}/metrics`)).text();
    expect(text).toMatch(/parley_engine_requests_waiting\{[^}]*endpoint="[^"]+"[^}]*\} 30/);
    expect(text).toMatch(/parley_engine_kv_cache_usage\{[^}]*\} 0\.8/);
    expect(text).toMatch(/parley_engine_load_reported\{[^}]*\} 1/);
  });
});

describe('how long a request holds a slot, as the engine or the fleet reports it', () => {
  const INTERVAL_MS = 200;
  /** Three replicas on two scripted engines, read every INTERVAL_MS; `sendFrom` says which engine took the request. */
  async function fleetOnTwo(engines: { script: Script; counts: { chats: number } }[]) {
    const running = await startFleetOn(engines.map((e) => e.script), ([a, b]) => ({
      gateway: { engineLoad: { intervalMs: INTERVAL_MS, timeoutMs: 150 } },
      models: [modelEntry('m', [{ kind: 'vllm', url: a }, { kind: 'vllm', url: b }])],
    }), 3);
    const sendFrom = async (replica: TestGateway, body: unknown) => {
      const before = engines.map((e) => e.counts.chats);
      expect((await postChat(replica, body)).status).toBe(200);
      return engines.findIndex((e, i) => e.counts.chats > before[i]);
    };
    /** Waits until every replica's view of endpoint `index` meets `met`. */
    const until = async (index: number, what: string, met: (e: EndpointsView['data'][number]['endpoints'][number]) => boolean) => {
      for (let tries = 0; tries < 60; tries++) {
        const views = await Promise.all(running.replicas.map(async (gw) => (await endpointsView(gw)).data[0].endpoints[index]));
        if (views.every(met)) return;
        await sleep(INTERVAL_MS / 2);
      }
      throw new Error(`the replicas never saw ${what}`);
    };
    return { ...running, sendFrom, until };
  }

  it('weighs a queue by the engine’s run time for every request, not by the replicas’ own quick ones', async () => {
    // Each read finds one more request finished, having run `runS` seconds (none while it is undefined); a busy
    // engine runs 2 with 2 waiting.
    const engines = [0, 1].map(() => {
      const state: { busy: boolean; runS?: number; ran: { requests: number; seconds: number } } = { busy: false, runS: 0.001, ran: { requests: 0, seconds: 0 } };
      const engine = scriptedVllm(() => {
        if (state.runS !== undefined) state.ran = { requests: state.ran.requests + 1, seconds: state.ran.seconds + state.runS };
        return { running: state.busy ? 2 : 0, waiting: state.busy ? 2 : 0, kv: 0.1, ran: state.ran };
      });
      return { state, ...engine };
    });
    const fleet = await fleetOnTwo(engines);
    try {
      // 3,000 bytes, counted as up to 3,000 tokens without a tokenizer: 300 ms to read again at the default 10,000 a second.
      const body = { model: 'm', messages: [{ role: 'user', content: 'x'.repeat(3000) }], prompt_cache_key: 'session-1' };
      // Every replica has sent the session home and seen its replies take a few ms.
      const home = await fleet.sendFrom(fleet.replicas[0], body);
      for (const replica of fleet.replicas.slice(1)) expect(await fleet.sendFrom(replica, body)).toBe(home);
      const queuedAtHome = (runMs: number) => fleet.until(home, `a run time of ${runMs} ms at home`, (e) => e.engine.runMs === runMs && e.engine.external === 2 && e.engine.capacity === 2);
      // Home runs 2 and has 2 waiting: 1 ahead of the next request, waiting half a run time for a slot.
      engines[home].state.busy = true;
      await queuedAtHome(1);
      expect(await fleet.sendFrom(fleet.replicas[1], body)).toBe(home);
      // Its requests now run 4 s: 2 s of queue, against 300 ms to read the prompt again on the idle engine.
      engines[home].state.runS = 4;
      await queuedAtHome(4000);
      expect(await fleet.sendFrom(fleet.replicas[2], body)).toBe(1 - home);
      // Restarted, its counts begin again: the last figure holds until requests finish.
      engines[home].state.ran = { requests: 0, seconds: 0 };
      engines[home].state.runS = undefined;
      await sleep(3 * INTERVAL_MS);
      await queuedAtHome(4000);
    } finally {
      await fleet.close();
    }
  });

  it('goes by the whole fleet’s holds where the engine reports no run time, not by one replica’s quick ones', async () => {
    // No run-time histogram (as SGLang and llama.cpp serve none); a request whose prompt opens with "slow" takes 600 ms.
    const engines = [0, 1].map(() => {
      const state = { busy: false };
      const engine = scriptedVllm(() => ({ running: state.busy ? 2 : 0, waiting: state.busy ? 2 : 0, kv: 0.1 }), 'ok', (req) => (String(req.body.messages?.[0]?.content).startsWith('slow') ? 600 : 5));
      return { state, ...engine };
    });
    const fleet = await fleetOnTwo(engines);
    try {
      // About 300 bytes: 30 ms to read again at the default 10,000 tokens a second.
      const body = (opening: string) => ({ model: 'm', messages: [{ role: 'user', content: `${opening} ${'x'.repeat(300)}` }], prompt_cache_key: 'session-2' });
      // Replica 0 sends the session home and sees its replies take a few ms; the other two send its slow requests.
      const home = await fleet.sendFrom(fleet.replicas[0], body('quick'));
      const slow = await Promise.all(fleet.replicas.slice(1).map(async (replica) => [await fleet.sendFrom(replica, body('slow')), await fleet.sendFrom(replica, body('slow'))]));
      expect(slow.flat()).toEqual([home, home, home, home]);
      await fleet.until(home, 'the fleet’s holds', (e) => (e.fleetHeldMs ?? 0) >= 300);
      // Home runs 2 and has 2 waiting: 1 ahead, waiting half the fleet's hold (at least 150 ms) against 30 ms to read
      // the prompt again; half replica 0's own hold would be a few ms.
      engines[home].state.busy = true;
      await fleet.until(home, 'the queue at home', (e) => e.engine.external === 2 && e.engine.capacity === 2);
      expect(await fleet.sendFrom(fleet.replicas[0], body('quick'))).toBe(1 - home);
    } finally {
      await fleet.close();
    }
  });
});

describe('engines whose metrics fail', () => {
  it('goes by its own counts where a read fails, hangs or never ends, says why, and fails no request', async () => {
    const failing = scriptedVllm(() => ({ running: 0, waiting: 0, kv: 0 }), 'error');
    const hanging = scriptedVllm(() => ({ running: 0, waiting: 0, kv: 0 }), 'hang');
    const endless = scriptedVllm(() => ({ running: 0, waiting: 0, kv: 0 }), 'endless');
    const { gw, close } = await startGatewayOn([failing.script, hanging.script, endless.script], ([a, b, c]) => ({
      gateway: { engineLoad: { intervalMs: 100, timeoutMs: 50 } },
      models: [modelEntry('m', [{ kind: 'vllm', url: a }, { kind: 'sglang', url: b }, { kind: 'vllm', url: c }])],
    }));
    try {
      await sleep(400);
      const results = await Promise.all(Array.from({ length: 12 }, (_, i) => postChat(gw, { model: 'm', messages: [{ role: 'user', content: `q${i}` }] })));
      expect(results.map((r) => r.status)).toEqual(Array(12).fill(200));
      const [f, h, e] = (await endpointsView(gw)).data[0].endpoints;
      expect(f.engine).toMatchObject({ source: 'own-counts', reason: 'last read failed: HTTP 500', external: 0 });
      expect(h.engine).toMatchObject({ source: 'own-counts', reason: 'last read failed: no answer in 50 ms', external: 0 });
      // Over 8 MiB, or past the timeout, whichever comes first on this machine: never read to its end.
      expect(e.engine).toMatchObject({ source: 'own-counts', reason: expect.stringMatching(/^last read failed: (metrics text over 8388608 bytes|no answer in 50 ms)$/) });
      expect(failing.counts.chats + hanging.counts.chats + endless.counts.chats).toBe(12);
      expect(await (await fetch(`${gw.url}/metrics`)).text()).toMatch(/parley_engine_load_reported\{[^}]*\} 0/);
    } finally {
      await close();
    }
  });
});
