// Where the fleet's batches stand, for operators: each batch with lines to
// run (its account, status, counts, cost so far), read from Redis when the
// admin API asks, and summed for /metrics when a replica is scraped.
import type { Redis } from 'ioredis';
import { redisKeys } from '../redis/keys.js';
import { readBatches, type BatchRecord } from './batch-store.js';

/** The most batches one reading lists. */
const LISTED = 1000;

/** The batches with lines still to run (or running, or finalizing), oldest first. */
export async function activeBatches(redis: Redis): Promise<BatchRecord[]> {
  const members = await redis.zrange(redisKeys.activeBatches, 0, LISTED - 1);
  const read = await readBatches(redis, members.map((m) => m.split(' ') as [string, string]));
  return read.filter((b): b is BatchRecord => b !== null);
}

/**
 * The fleet's batch lines by state, over every active batch: what /metrics shows. `running` counts the lines
 * replicas have claimed: being served, or waiting at an endpoint for a slot flex may take.
 */
export interface BatchLineTotals {
  batches: number;
  queued: number;
  running: number;
  succeeded: number;
  errored: number;
}

export function lineTotals(batches: BatchRecord[]): BatchLineTotals {
  const totals = { batches: batches.length, queued: 0, running: 0, succeeded: 0, errored: 0 };
  for (const b of batches) {
    totals.queued += b.counts.queued;
    totals.running += b.counts.running;
    totals.succeeded += b.counts.succeeded;
    totals.errored += b.counts.errored;
  }
  return totals;
}

/** An active batch as the admin API lists it. */
export const batchSummary = (b: BatchRecord) => ({
  id: b.id, api: b.api, account: b.account, key: b.keyId, model: b.model, endpoint: b.endpoint, status: b.status,
  created_at: b.times.created, expires_at: b.times.expires,
  lines: { total: b.counts.total, queued: b.counts.queued, running: b.counts.running, succeeded: b.counts.succeeded, errored: b.counts.errored },
  cost_micros: b.cost,
});
