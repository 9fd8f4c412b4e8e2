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
//
// A key sent away from a busy home has its prompt cached where it went, and
// the home's copy falls behind as the conversation grows. So the key's prompt
// counts as cached where it went: its requests keep going there while that
// costs least, even after the home frees, and the key is the home's again
// once it goes back. Where the home's longer queue was weighed against
// reading the prompt again, a growing prompt sent the key back home to a
// stale copy behind the queue (engine-load-routing.mjs, scenario c). The
// move is shared with the known keys (known-prefixes.ts), so every replica
// counts the prompt cached in one place within an exchange of the move.
import { KnownPrefixes } from '../known-prefixes.js';
import { PrefixPlacement, rendezvousOrder, type PlacementEndpoint } from '../prefix-placement.js';
import { isKvCacheFull, queueWaitMs, rereadMs } from '../endpoint-score.js';
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
    const { key, unkept } = request;
    if (candidates.length <= 1 || !key) return candidates;
    // A key not kept is not placed: its home is the first in its rendezvous order.
    if (!unkept) this.known.saw(key);
    const homeName = unkept ? undefined : this.placementFor(candidates).homeOf(key)?.name;
    const order = rendezvousOrder(key, candidates);
    const home = order.find((c) => c.name === homeName) ?? order[0];
    const total = candidates.reduce((sum, c) => sum + c.load, 0);
    const weights = candidates.reduce((sum, c) => sum + c.weight, 0);
    // The mean counts this request, so that an idle pool takes it at home.
    const mean = (total + 1) / weights;
    const bound = Math.max(this.settings.loadFactor * mean, mean + this.settings.maxImbalance);
    const withinBound = (c: C) => (c.load + 1) / c.weight <= bound;
    const usable = (c: C) => withinBound(c) && !isKvCacheFull(c);
    const movedName = unkept ? undefined : this.known.movedTo(key);
    const moved = movedName === undefined ? undefined : order.find((c) => c.name === movedName && usable(c));
    const cachedAt = moved ?? home;
    const preference = [cachedAt, ...(moved ? [home] : []), ...order.filter((c) => c !== home && c !== moved)];
    // Where the prompt is cached, unless its queue there costs more than reading the prompt again elsewhere
    // (endpoint-score.ts); then the cheapest of the others within the bound and not KV-full, first in the key's
    // order on a tie, so that every replica makes the same choice.
    const reread = rereadMs(request.promptTokens, this.settings.prefillTokensPerSecond);
    let cheapest: { c: C; cost: number } | undefined;
    for (const c of preference) {
      if (!usable(c)) continue;
      const cost = queueWaitMs(c) + (c === cachedAt ? 0 : reread);
      if (cheapest === undefined || cost < cheapest.cost) cheapest = { c, cost };
    }
    const chosen = cheapest?.c ?? preference.find(withinBound) ?? preference[0];
    if (chosen !== cachedAt) this.spills++;
    if (!unkept) this.known.move(key, chosen === home ? undefined : chosen.name);
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
