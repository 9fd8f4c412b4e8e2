// Starts a gateway: connect to Redis (or start a private one), load the
// routing file, start the local engines it names, listen, and swap in each
// valid new version of the file.
import type { FSWatcher } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ensureDemoAccount, type DemoAccount } from '../operator/demo-account.js';
import { KeyAuthenticator } from '../accounts/key-authenticator.js';
import { resolveKeySecret } from '../accounts/server-secret.js';
import { MICROS_PER_UNIT } from '../billing/prices.js';
import { HoldQueue } from '../billing/hold-queue.js';
import { SettlementJournal } from '../billing/settlement-journal.js';
import { SettlementQueue } from '../billing/settlement-queue.js';
import { loadRoutingFile, watchRoutingFile } from '../config.js';
import { LocalEngines } from '../engine/supervisor.js';
import { listen } from '../listen.js';
import { connectRedis, GATEWAY_COMMAND_TIMEOUT_MS, type Redis } from '../redis/connection.js';
import type { SharedRedis } from '../redis/shared-redis.js';
import { checkEvictionPolicy } from '../redis/eviction-policy.js';
import { checkKeyLayout } from '../redis/key-layout.js';
import { startPrivateRedis } from '../redis/private-server.js';
import { PrefixSharing } from '../routing/prefix-sharing.js';
import { Router } from '../routing/router.js';
import { buildRoutingTable, type RoutingTable } from '../routing/routing-table.js';
import type { GatewayContext } from './context.js';
import { flushRequestLog } from '../telemetry/request-log.js';
import { createMetricsServer } from '../telemetry/metrics-server.js';
import { Telemetry } from '../telemetry/telemetry.js';
import { BodyBudget } from './body-budget.js';
import { KnownRefusals } from './known-refusals.js';
import { Lifecycle } from './lifecycle.js';
import { BatchRunner } from './batch-runner.js';
import { createGatewayServer } from './server.js';

export interface GatewayOptions {
  configPath: string;
  dataDir: string;
  host: string;
  port: number;
  /** The shared Redis; without it, a private redis-server in the data folder. */
  redis?: SharedRedis;
  /** The API-key hashing secret; by default PARLEY_KEY_SECRET or the data folder's. */
  keySecret?: string;
  /** Where GET /metrics is served, on `host`; without it, on the API's own port. */
  metricsPort?: number;
}

export interface RunningGateway {
  url: string;
  /** Where GET /metrics is served. */
  metricsUrl: string;
  /** The demo account's key and platform password, on the first start with a private Redis; shown this once. */
  demo?: DemoAccount;
  context: GatewayContext;
  /** Drains (requests in flight get `graceMs`, by default the routing file's shutdownGraceMs), then stops. */
  close(graceMs?: number): Promise<void>;
}

const SETTLE_ON_CLOSE_MS = 5_000;

/** What has been started, stopped in reverse order: on close, or when the start fails part-way (a private Redis would outlive it). */
class StartedParts {
  private readonly stops: (() => unknown)[] = [];

  add<T>(part: T, stop: (part: T) => unknown): T {
    this.stops.push(() => stop(part));
    return part;
  }

  async stopAll(): Promise<void> {
    for (const stop of this.stops.splice(0).reverse()) await stop();
  }
}

/** Redis (the shared one, or a private one with a demo account on its first start) and the keys it holds. */
async function openState(opts: GatewayOptions, secret: string, demoCredit: number, parts: StartedParts) {
  const privateRedis = opts.redis ? undefined : parts.add(await startPrivateRedis(opts.dataDir), (r) => r.stop());
  const redis = parts.add(await connectRedis(opts.redis ?? privateRedis!.target, 'parley', GATEWAY_COMMAND_TIMEOUT_MS), (r) => r.disconnect());
  await checkKeyLayout(redis);
  await checkEvictionPolicy(redis);
  const keys = parts.add(await KeyAuthenticator.start(redis, secret), (k) => k.close());
  const demo = privateRedis && demoCredit > 0 ? await ensureDemoAccount(redis, secret, Math.round(demoCredit * MICROS_PER_UNIT)) : undefined;
  return { redis, keys, demo };
}

/** Settlements, journaled on disk until Redis has them; and those an earlier process (this one's, or a dead replica's) owed. */
function openSettlements(redis: Redis, dataDir: string, table: () => RoutingTable, parts: StartedParts): SettlementQueue {
  const journal = parts.add(SettlementJournal.open(join(dataDir, 'settlements')), (j) => j.close());
  const settlements = new SettlementQueue(redis, () => (table().billing.usageRetentionDays ?? 0) * 86_400_000, journal);
  const replayed = settlements.adoptOrphans(table().billing.holdTtlMs);
  if (replayed > 0) console.log(`parley: settling ${replayed} replies an earlier process owed (from its settlement journal)`);
  // A replica that died owing settlements on a volume others share: adopted once no one has written its journal for a hold's life.
  const adoptAbandoned = setInterval(() => settlements.adoptOrphans(table().billing.holdTtlMs), table().billing.holdTtlMs);
  adoptAbandoned.unref();
  parts.add(adoptAbandoned, clearInterval);
  return settlements;
}

export async function startGateway(opts: GatewayOptions): Promise<RunningGateway> {
  const routingFile = loadRoutingFile(opts.configPath);
  const secret = opts.keySecret ?? resolveKeySecret(opts.dataDir, opts.redis !== undefined);
  const parts = new StartedParts();
  try {
    const { redis, keys, demo } = await openState(opts, secret, routingFile.billing.demoCredit, parts);
    const engines = parts.add(new LocalEngines(opts.dataDir), (e) => e.stopAll());
    let table: RoutingTable = await buildRoutingTable(routingFile, engines);
    const sharing = parts.add(new PrefixSharing(redis), (p) => p.close());
    const router = parts.add(new Router(sharing, redis), (r) => r.close());
    router.apply(table);
    const telemetry = parts.add(new Telemetry(router), (t) => t.shutdown());
    const settlements = openSettlements(redis, opts.dataDir, () => table, parts);
    const lifecycle = new Lifecycle();
    const bodies = new BodyBudget(() => table.settings.bodyBytesPerAccount);
    const context: GatewayContext = { routing: () => table, router, lifecycle, bodies, refusals: new KnownRefusals(redis), telemetry, redis, keys, holds: new HoldQueue(redis), settlements, keySecret: secret };
    const server = createGatewayServer(context, opts.metricsPort === undefined);
    server.keepAliveTimeout = 65_000;
    await listen(server, opts.port, opts.host);
    const metricsServer = opts.metricsPort === undefined ? undefined : parts.add(createMetricsServer(telemetry), (s) => new Promise((resolve) => s.close(resolve)));
    if (metricsServer) await listen(metricsServer, opts.metricsPort!, opts.host);
    const batches = (context.batches = new BatchRunner(context));
    telemetry.watch({ settlementsJournaled: () => settlements.journaled, redisReady: () => redis.status === 'ready', keyCaches: () => keys.remembered(), batchTotals: () => batches.fleetTotals(), batchLinesRunningHere: () => batches.linesRunning });

    const watcher = applyRoutingFileChanges(opts.configPath, engines, (next) => {
      router.apply(next);
      table = next;
    });
    const host = opts.host === '0.0.0.0' || opts.host === '::' ? '127.0.0.1' : opts.host;
    const urlOf = (s: Server) => `http://${host}:${(s.address() as AddressInfo).port}`;
    const url = urlOf(server);
    return {
      url,
      metricsUrl: `${metricsServer ? urlOf(metricsServer) : url}/metrics`,
      demo,
      context,
      close: async (graceMs?: number) => {
        watcher.close();
        // Still listening while draining: a request that arrives before Kubernetes has taken this
        // replica out of the Service gets a clear 503 to retry, not a refused connection.
        await Promise.all([lifecycle.drain(graceMs ?? table.settings.shutdownGraceMs), batches.stop(graceMs ?? table.settings.shutdownGraceMs)]);
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await closed;
        flushRequestLog();
        const unsettled = await settlements.drain(SETTLE_ON_CLOSE_MS);
        if (unsettled > 0) console.warn(`parley: ${unsettled} settlements still pending at shutdown; their holds expire on their own`);
        await parts.stopAll();
      },
    };
  } catch (err) {
    await parts.stopAll();
    throw err;
  }
}

/** Builds each valid new version of the routing file and hands it to `apply`; one that is not valid is logged, and the previous one kept. */
function applyRoutingFileChanges(path: string, engines: LocalEngines, apply: (next: RoutingTable) => void): FSWatcher {
  return watchRoutingFile(
    path,
    (file) => {
      buildRoutingTable(file, engines).then(
        (next) => {
          apply(next);
          console.log(`parley: routing file reloaded: ${[...next.models.keys()].join(', ')}`);
        },
        (err) => console.error(`parley: routing file not applied: ${err.message}`),
      );
    },
    (err) => console.error(`parley: routing file not applied, still serving the previous one: ${err.message}`),
  );
}
