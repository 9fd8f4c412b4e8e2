// Chooses where a request goes. Endpoints are grouped by priority; within a
// group the model's policy orders those whose circuit lets traffic through;
// the plan is that order, group after group, for failover to walk. The
// router also owns each endpoint's live state, its active probe and its
// engine's reports of its own load (routing/engine-reports.ts), and keeps
// them across routing-file reloads.
import { request as httpRequest } from 'undici';
import type { GatewaySettings } from '../config.js';
import { PROBE_CALLER } from './circuit-breaker.js';
import { EndpointState, type EndpointLimits, type EndpointSnapshot } from './endpoint-state.js';
import { createPolicy } from './policies/index.js';
import type { RoutingPolicy, RoutingRequest } from './policies/policy.js';
import type { Redis } from 'ioredis';
import { FleetLoad } from './fleet-load.js';
import { EngineReports, type EngineReport } from './engine-reports.js';
import { endpointLoad } from './endpoint-score.js';
import { FleetSlots } from './fleet-slots.js';
import type { PrefixSharing } from './prefix-sharing.js';
import { NewKeyQuota } from './new-key-quota.js';
import type { RoutedEndpoint, RoutedModel, RoutingTable } from './routing-table.js';
import { keyHeader } from '../upstream/client.js';

export interface RoutePlan {
  /** Endpoints in the order to try them. */
  endpoints: RoutedEndpoint[];
  request: RoutingRequest;
}

export interface EndpointView extends EndpointSnapshot {
  /** Requests in flight and waiting there from every gateway replica. */
  fleetLoad: number;
  /** Affinity keys placed there (prefix affinity only). */
  affinityKeys: number;
  /** The engine's own report of its load, or why routing goes by Parley's counts alone, and how old its last reading is. */
  engine: EngineReport & { ageMs?: number };
  /** What the policy compares: fleetLoad plus the engine's requests from elsewhere (routing/endpoint-score.ts). */
  routingLoad: number;
  /** How long the fleet's requests held a slot there lately (ms), where the fleet shares it. */
  fleetHeldMs?: number;
  url: string;
  priority: number;
  weight: number;
}

const limitsOf = (e: RoutedEndpoint, accountQueueShare: number): EndpointLimits => ({
  maxConcurrent: e.maxConcurrent,
  maxQueue: e.maxQueue,
  accountQueueShare,
  flexFillsAll: e.priorityScheduling,
});

export class Router {
  private readonly fleet: FleetLoad | undefined;
  private readonly slots: FleetSlots | undefined;
  private readonly engines: EngineReports;
  private readonly newKeys = new NewKeyQuota();

  /**
   * With Redis, prefix placement learns the fleet's affinity keys (`sharing`), loads count the fleet's requests and
   * endpoints' slots are the fleet's (`redis`); without, each replica goes by what it sees.
   */
  constructor(private readonly sharing?: PrefixSharing, redis?: Redis) {
    this.fleet = redis && new FleetLoad(redis, () => [...this.states].map(([name, state]): [string, number] => [name, state.load]));
    this.slots = redis && new FleetSlots(redis);
    this.engines = new EngineReports(
      redis,
      (name) => (this.states.get(name)?.load ?? 0) + (this.fleet?.othersAt(name) ?? 0),
      (name) => this.states.get(name)?.takeHolds() ?? { requests: 0, ms: 0 },
    );
  }

  private readonly states = new Map<string, EndpointState>();
  private readonly policies = new Map<string, { key: string; policy: RoutingPolicy }>();
  private readonly probes = new Map<string, NodeJS.Timeout>();
  /** Each endpoint as the routing table in force has it, for its probes. */
  private readonly endpoints = new Map<string, RoutedEndpoint>();
  private table: RoutingTable | undefined;

  /** Takes a new routing table: new endpoints get state and a probe, removed ones lose theirs, kept ones take the new limits and health settings. */
  apply(table: RoutingTable): void {
    this.table = table;
    const { health, failover } = table.settings;
    const live = new Set<string>();
    for (const model of table.models.values()) {
      const { policy, ...settings } = model.config.routing;
      const key = JSON.stringify(model.config.routing);
      if (this.policies.get(model.config.id)?.key !== key) {
        this.policies.set(model.config.id, { key, policy: createPolicy(policy, settings, this.sharing?.known(model.config.id)) });
      }
      for (const e of model.endpoints) {
        live.add(e.name);
        const limits = limitsOf(e, failover.accountQueueShare);
        this.endpoints.set(e.name, e);
        const state = this.states.get(e.name);
        if (state) {
          state.limits = limits;
          state.breaker.settings = health;
        } else {
          const created = new EndpointState(e.name, limits, health, this.slots);
          created.breaker.verify = () => void this.probe(e.name);
          created.engineWaiting = () => this.engineReport(e.name).load?.waiting ?? 0;
          created.engineCapacity = () => {
            const report = this.engineReport(e.name);
            return report.capacity === undefined ? undefined : report.capacity - report.external;
          };
          this.states.set(e.name, created);
        }
        this.startProbe(e, table.settings);
      }
    }
    this.engines.apply([...this.endpoints.values()].filter((e) => live.has(e.name)), table.settings.engineLoad);
    for (const id of this.policies.keys()) {
      if (table.models.has(id)) continue;
      this.policies.delete(id);
      this.sharing?.forget(id);
    }
    for (const name of [...this.states.keys()]) {
      if (live.has(name)) continue;
      this.states.delete(name);
      this.endpoints.delete(name);
      clearInterval(this.probes.get(name));
      this.probes.delete(name);
    }
  }

  /**
   * `affinityKey`: which cache the request needs, asked for only by a policy that reads it. A key the policy has
   * not seen waits for the fleet's order of keys (routing/prefix-sharing.ts), so that every replica places it alike,
   * unless `account` has added its quota of new keys (routing/new-key-quota.ts): then it is not kept.
   */
  async plan(model: RoutedModel, affinityKey: () => string, promptTokens?: number, account?: string): Promise<RoutePlan> {
    const entry = this.policies.get(model.config.id)!;
    const key = model.endpoints.length > 1 && entry.policy.needsKey ? affinityKey() : undefined;
    const isNew = key !== undefined && entry.policy.isKnown?.(key) === false;
    const unkept = isNew && account !== undefined && !this.newKeys.admits(model.config.id, account, key);
    if (this.sharing && isNew && !unkept) await this.sharing.place(model.config.id, key);
    const request: RoutingRequest = { key, promptTokens, unkept };
    const priorities = [...new Set(model.endpoints.map((e) => e.priority))].sort((a, b) => a - b);
    const endpoints: RoutedEndpoint[] = [];
    for (const priority of priorities) {
      const group = model.endpoints
        .filter((e) => e.priority === priority && this.state(e).breaker.isAvailable())
        .map((e) => {
          const state = this.state(e);
          const engine = this.engines.report(e);
          const load = endpointLoad(state.load + (this.fleet?.othersAt(e.name) ?? 0), engine);
          return { endpoint: e, name: e.name, load, weight: e.weight, kvCacheUse: engine.load?.kvCacheUse, engineQueue: engine.load?.waiting, capacity: engine.capacity, heldMs: engine.runMs ?? this.engines.heldMs(e) ?? state.heldMs };
        });
      endpoints.push(...entry.policy.order(group, request).map((c) => c.endpoint));
    }
    return { endpoints, request };
  }

  /** The endpoint's live state; a request still on a table a reload replaced may ask for a removed one. */
  state(endpoint: RoutedEndpoint): EndpointState {
    let state = this.states.get(endpoint.name);
    if (!state) {
      const { health, failover } = this.table!.settings;
      state = new EndpointState(endpoint.name, limitsOf(endpoint, failover.accountQueueShare), health, this.slots);
      this.states.set(endpoint.name, state);
    }
    return state;
  }

  /**
   * For operators: every model's endpoints with health, circuit, load (this replica's and the fleet's), cache
   * share, latency, and how many affinity keys (tenants, sessions) prefix affinity has placed on each.
   */
  snapshot(): { model: string; policy: string; spills: number; endpoints: EndpointView[] }[] {
    if (!this.table) return [];
    return [...this.table.models.values()].map((m) => {
      const policy = this.policies.get(m.config.id)?.policy;
      const homes = policy?.homes?.();
      return {
        model: m.config.id,
        policy: m.config.routing.policy,
        spills: policy?.spills ?? 0,
        endpoints: m.endpoints.map((e) => {
          const state = this.state(e).snapshot();
          const fleetLoad = state.inFlight + state.queued + (this.fleet?.othersAt(e.name) ?? 0);
          const engine = this.engines.report(e);
          const fleetHeldMs = this.engines.heldMs(e);
          return {
            ...state,
            fleetLoad,
            routingLoad: endpointLoad(fleetLoad, engine),
            engine: { ...engine, ageMs: this.engines.ageMs(e) },
            ...(fleetHeldMs === undefined ? {} : { fleetHeldMs: Math.round(fleetHeldMs) }),
            affinityKeys: homes?.get(e.name) ?? 0,
            url: e.url,
            priority: e.priority,
            weight: e.weight,
          };
        }),
      };
    });
  }

  /** The engine's report for the endpoint of this name in the routing table in force. */
  private engineReport(name: string): EngineReport {
    const endpoint = this.endpoints.get(name);
    return endpoint ? this.engines.report(endpoint) : { source: 'own-counts', reason: 'endpoint removed', external: 0 };
  }

  async close(): Promise<void> {
    this.fleet?.close();
    this.engines.close();
    for (const timer of this.probes.values()) clearInterval(timer);
    this.probes.clear();
    await this.slots?.close();
  }

  private startProbe(endpoint: RoutedEndpoint, settings: GatewaySettings): void {
    const { probe } = settings.health;
    clearInterval(this.probes.get(endpoint.name));
    if (probe.intervalMs === 0) return void this.probes.delete(endpoint.name);
    const timer = setInterval(() => void this.probe(endpoint.name), probe.intervalMs);
    timer.unref();
    this.probes.set(endpoint.name, timer);
  }

  /** GETs the endpoint's probe path, and tells its circuit how that went: every few seconds, and at once when its circuit suspects it. */
  private async probe(name: string): Promise<void> {
    const endpoint = this.endpoints.get(name);
    const state = this.states.get(name);
    if (!endpoint || !state || !this.table) return;
    const { probe } = this.table.settings.health;
    try {
      const res = await httpRequest(`${endpoint.url}${probe.path}`, { headers: keyHeader(endpoint), headersTimeout: probe.timeoutMs, bodyTimeout: probe.timeoutMs });
      await res.body.dump();
      if (res.statusCode < 500) state.breaker.onSuccess(PROBE_CALLER);
      else state.breaker.onFailure(PROBE_CALLER);
    } catch (err) {
      state.breaker.onFailure(PROBE_CALLER, (err as { code?: string }).code === 'ECONNREFUSED');
    }
  }
}
