// Starts a gateway: connect to Redis (or start a private one), load the
// routing file, start the local engines it names, listen, and swap in each
// valid new version of the file.
import type { FSWatcher } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ensureDemoAccount } from '../operator/demo-account.js';
import { KeyAuthenticator } from '../accounts/key-authenticator.js';
import { resolveKeySecret } from '../accounts/server-secret.js';
import { MICROS_PER_UNIT } from '../billing/prices.js';
import { HoldQueue } from '../billing/hold-queue.js';
import { SettlementJournal } from '../billing/settlement-journal.js';
import { SettlementQueue } from '../billing/settlement-queue.js';
import { loadRoutingFile, watchRoutingFile } from '../config.js';
import { LocalEngines } from '../engine/supervisor.js';
import { listen } from '../listen.js';
import { connectRedis } from '../redis/connection.js';
import type { SharedRedis } from '../redis/shared-redis.js';
import { checkKeyLayout } from '../redis/key-layout.js';
import { startPrivateRedis } from '../redis/private-server.js';
import { PrefixSharing } from '../routing/prefix-sharing.js';
import { Router } from '../routing/router.js';
import { buildRoutingTable, type RoutingTable } from '../routing/routing-table.js';
import type { GatewayContext } from './context.js';
import { Telemetry } from '../telemetry/telemetry.js';
import { Lifecycle } from './lifecycle.js';
import { createGatewayServer } from './server.js';

export interface GatewayOptions {
  configPath: string;
  dataDir: string;
  host: string;
  port: number;
  /** The shared Redis; without it, a private redis-server in the data folder. */
  /** The shared Redis; without it, a private redis-server in the data folder. */
  redis?: SharedRedis;
  /** The API-key hashing secret; by default PARLEY_KEY_SECRET or the data folder's. */
  keySecret?: string;
}

export interface RunningGateway {
  url: string;
  /** The demo account's key, on the first start with a private Redis; shown this once. */
  demoKey?: string;
  context: GatewayContext;
  /** Drains (requests in flight get `graceMs`, by default the routing file's shutdownGraceMs), then stops. */
  close(graceMs?: number): Promise<void>;
}

const SETTLE_ON_CLOSE_MS = 5_000;

export async function startGateway(opts: GatewayOptions): Promise<RunningGateway> {
  const routingFile = loadRoutingFile(opts.configPath);
  const secret = opts.keySecret ?? resolveKeySecret(opts.dataDir, opts.redis !== undefined);
  /** What has been started, stopped in reverse order: on close, or when the start fails part-way (a private Redis would outlive it). */
  const started: (() => unknown)[] = [];
  const stopStarted = async () => {
    for (const stop of started.splice(0).reverse()) await stop();
  };
  try {
    const privateRedis = opts.redis ? undefined : await startPrivateRedis(opts.dataDir);
    if (privateRedis) started.push(() => privateRedis.stop());
    const redis = await connectRedis(opts.redis ?? privateRedis!.target);
    started.push(() => redis.disconnect());
    await checkKeyLayout(redis);
    const keys = await KeyAuthenticator.start(redis, secret);
    started.push(() => keys.close());
    const demoKey =
      privateRedis && routingFile.billing.demoCredit > 0
        ? await ensureDemoAccount(redis, secret, Math.round(routingFile.billing.demoCredit * MICROS_PER_UNIT))
        : undefined;

    const engines = new LocalEngines(opts.dataDir);
    started.push(() => engines.stopAll());
    let table: RoutingTable = await buildRoutingTable(routingFile, engines);
    const sharing = new PrefixSharing(redis);
    started.push(() => sharing.close());
    const router = new Router(sharing, redis);
    router.apply(table);
    started.push(() => router.close());
    const lifecycle = new Lifecycle();
    const telemetry = new Telemetry(router);
    started.push(() => telemetry.shutdown());
    const keepUsageEventsMs = () => (table.billing.usageRetentionDays ?? 0) * 86_400_000;
    const journal = SettlementJournal.open(join(opts.dataDir, 'settlements'));
    started.push(() => journal.close());
    const settlements = new SettlementQueue(redis, keepUsageEventsMs, journal);
    telemetry.watch({ settlementsJournaled: () => settlements.journaled, redisReady: () => redis.status === 'ready' });
    const replayed = settlements.adoptOrphans(table.billing.holdTtlMs);
    if (replayed > 0) console.log(`parley: settling ${replayed} replies an earlier process owed (from its settlement journal)`);
    // A replica that died owing settlements on a volume others share: adopted once no one has written its journal for a hold's life.
    const adoptAbandoned = setInterval(() => settlements.adoptOrphans(table.billing.holdTtlMs), table.billing.holdTtlMs);
    adoptAbandoned.unref();
    started.push(() => clearInterval(adoptAbandoned));
    const context: GatewayContext = { routing: () => table, router, lifecycle, telemetry, redis, keys, holds: new HoldQueue(redis), settlements, keySecret: secret };
    const server = createGatewayServer(context);
    // Streams can be long; Node's default request timeout would cut them.
    server.requestTimeout = 0;
    server.keepAliveTimeout = 65_000;
    await listen(server, opts.port, opts.host);

    const watcher = applyRoutingFileChanges(opts.configPath, engines, (next) => {
      router.apply(next);
      table = next;
    });
    const { port } = server.address() as AddressInfo;
    const host = opts.host === '0.0.0.0' || opts.host === '::' ? '127.0.0.1' : opts.host;
    return {
      url: `http://${host}:${port}`,
      demoKey,
      context,
      close: async (graceMs?: number) => {
        watcher.close();
        // Still listening while draining: a request that arrives before Kubernetes has taken this
        // replica out of the Service gets a clear 503 to retry, not a refused connection.
        await lifecycle.drain(graceMs ?? table.settings.shutdownGraceMs);
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await closed;
        const unsettled = await context.settlements.drain(SETTLE_ON_CLOSE_MS);
        if (unsettled > 0) console.warn(`parley: ${unsettled} settlements still pending at shutdown; their holds expire on their own`);
        await stopStarted();
      },
    };
  } catch (err) {
    await stopStarted();
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
