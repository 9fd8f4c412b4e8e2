// Passive health: an endpoint that refused or dropped a connection is left
// out for a short cool-down, so requests go to one that answers.
import type { RoutedEndpoint, RoutedModel } from './routing-table.js';

const COOL_DOWN_MS = 2_000;
const downUntil = new Map<string, number>();

export function markUnreachable(endpoint: RoutedEndpoint): void {
  downUntil.set(endpoint.name, Date.now() + COOL_DOWN_MS);
}

export function markReachable(endpoint: RoutedEndpoint): void {
  downUntil.delete(endpoint.name);
}

/** The endpoints that are not cooling down, in the routing file's order. */
export function healthyEndpoints(model: RoutedModel): RoutedEndpoint[] {
  const now = Date.now();
  return model.endpoints.filter((e) => (downUntil.get(e.name) ?? 0) <= now);
}
