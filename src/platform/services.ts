// What the platform's pages use, and nothing more: the shared state (through
// the accounts and billing modules), the routing table for the model pages,
// and the secret API keys are hashed with.
import type { ServerResponse } from 'node:http';
import type { Redis } from 'ioredis';
import type { BodyAllowance } from '../protocol/http-io.js';
import type { RoutingTable } from '../routing/routing-table.js';

export interface PlatformServices {
  redis: Redis;
  routing(): RoutingTable;
  keySecret: string;
  /** What each account's requests hold in flight on this replica: a download's part counts. */
  bodies: { allowance(account: string, res: ServerResponse): BodyAllowance };
}
