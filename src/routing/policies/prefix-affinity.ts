// Prefix affinity: requests that need the same upstream cache (a tenant's
// system prompt, an agent session's growing conversation) go to the same
// endpoint, and every gateway replica sends them to the same one. A
// request's affinity key (routing/affinity-key.ts) gets its home from
// PrefixPlacement over the fleet's known keys (consistent hashing with
// bounded loads, in rendezvous order), so replicas agree without asking one
// another on the request path.
//
// Load is bounded too: when the home has more requests than `loadFactor`
// times the mean and `maxImbalance` more than it (relative to weight; the
// second keeps a few requests in flight from spilling, which would cost two
// caches a prompt each), the request spills to the next endpoint in the
// key's own order, the same second home on every replica, whose cache then
// fills once. A single hot key thus spreads over as many endpoints as its
// load needs. The loads are the fleet's (routing/fleet-load.ts), so three
// replicas spill as one would, with the engine's work from elsewhere added
// where it reports it (routing/endpoint-score.ts); a home whose engine says
// it has a queue, or its KV cache is full, spills too, while another has
// neither.
import { KnownPrefixes } from '../known-prefixes.js';
import { PrefixPlacement, rendezvousOrder, type PlacementEndpoint } from '../prefix-placement.js';
import { isKvCacheFull, queueWaitMs, rereadMs, takesWorkNow } from '../endpoint-score.js';
import { type Candidate, type RoutingPolicy, type RoutingRequest } from './policy.js';

export interface PrefixAffinitySettings {
  /** A home with more than this many times the mean load (relative to weight) spills the request to the next endpoint... */
  loadFactor: number;
  /** ... when it also has this many requests more than the mean. */
  maxImbalance: number;
  /** How far past its share of prefixes an endpoint may be home to more (0.25: a quarter), when there are many. */
  placementSlack: number;
  /** The engines' prefill rate: what reading a prompt again elsewhere costs, against queueing at home. */
  prefillTokensPerSecond: number;
}

export class PrefixAffinityPolicy implements RoutingPolicy {
  readonly needsKey = true;
  spills = 0;
  private placement: { epoch: number; endpoints: string; placement: PrefixPlacement<PlacementEndpoint> } | undefined;

  constructor(private readonly settings: PrefixAffinitySettings, private readonly known: KnownPrefixes = new KnownPrefixes()) {}

  order<C extends Candidate>(candidates: C[], request: RoutingRequest): C[] {
    const { key } = request;
    if (candidates.length <= 1 || !key) return candidates;
    this.known.saw(key);
    const homeName = this.placementFor(candidates).homeOf(key)?.name;
    const order = rendezvousOrder(key, candidates);
    const home = order.find((c) => c.name === homeName) ?? order[0];
    const preference = [home, ...order.filter((c) => c !== home)];
    const total = candidates.reduce((sum, c) => sum + c.load, 0);
    const weights = candidates.reduce((sum, c) => sum + c.weight, 0);
    // The mean counts this request, so that an idle pool takes it at home.
    const mean = (total + 1) / weights;
    const bound = Math.max(this.settings.loadFactor * mean, mean + this.settings.maxImbalance);
    const withinBound = (c: C) => (c.load + 1) / c.weight <= bound;
    // Home, unless its queue costs more than reading the prompt again elsewhere, or its KV cache is so full it
    // would preempt: then the next in the key's order within the bound that would start it now (endpoint-score.ts).
    const staysHome = withinBound(home) && !isKvCacheFull(home) && queueWaitMs(home) <= rereadMs(request.promptTokens, this.settings.prefillTokensPerSecond);
    const chosen = staysHome
      ? home
      : (preference.find((c) => withinBound(c) && takesWorkNow(c)) ?? preference.find((c) => withinBound(c) && !isKvCacheFull(c)) ?? preference.find(withinBound) ?? preference[0]);
    if (chosen !== home) this.spills++;
    return [chosen, ...preference.filter((c) => c !== chosen)];
  }

  isKnown(key: string): boolean {
    return this.known.has(key);
  }

  /** How many known keys each endpoint is home to, by the last placement computed. */
  homes(): Map<string, number> {
    return this.placement?.placement.homesPerEndpoint() ?? new Map();
  }

  /**
   * Computed anew only when the known prefixes are reordered or forgotten (the background sharing, at most
   * every 200 ms) or the endpoints available change; a prefix seen for the first time is placed onto it.
   */
  private placementFor(candidates: Candidate[]): PrefixPlacement<PlacementEndpoint> {
    const endpoints = candidates.map((c) => `${c.name}\t${c.weight}`).join('\n');
    const keys = this.known.keys();
    if (this.placement?.epoch !== this.known.epoch || this.placement.endpoints !== endpoints) {
      const fleet = candidates.map(({ name, weight }) => ({ name, weight }));
      this.placement = { epoch: this.known.epoch, endpoints, placement: new PrefixPlacement(keys, fleet, this.settings.placementSlack) };
    }
    const { placement } = this.placement;
    for (let i = placement.size; i < keys.length; i++) placement.add(keys[i]);
    return placement;
  }
}
