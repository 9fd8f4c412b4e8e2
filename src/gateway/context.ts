// What every request handler reaches: the routing table in force and the
// shared state behind keys, credit and rate limits.
import type { Redis } from 'ioredis';
import type { KeyAuthenticator } from '../accounts/key-authenticator.js';
import type { BatchRunner } from './batch-runner.js';
import type { BodyBudget } from './body-budget.js';
import type { KnownRefusals } from './known-refusals.js';
import type { HoldQueue } from '../billing/hold-queue.js';
import type { SettlementQueue } from '../billing/settlement-queue.js';
import type { Router } from '../routing/router.js';
import type { Telemetry } from '../telemetry/telemetry.js';
import type { Lifecycle } from './lifecycle.js';
import type { RoutingTable } from '../routing/routing-table.js';

export interface GatewayContext {
  routing(): RoutingTable;
  router: Router;
  lifecycle: Lifecycle;
  /** The bytes of request bodies (and batch files read, downloads' parts) each account has in flight here. */
  bodies: BodyBudget;
  /** Accounts whose next request is known to be refused (a rate window full, no credit), met before its body is read. */
  refusals: KnownRefusals;
  telemetry: Telemetry;
  redis: Redis;
  keys: KeyAuthenticator;
  holds: HoldQueue;
  settlements: SettlementQueue;
  /** The secret API keys are hashed with, for keys made on the platform. */
  keySecret: string;
  /** This replica's runner of batch lines, once started. */
  batches?: BatchRunner;
}
