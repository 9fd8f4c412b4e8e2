// Smooth weighted round robin (as nginx does it): over any window each
// endpoint gets its weight's share, interleaved rather than in bursts.
import type { Candidate, RoutingPolicy } from './policy.js';

export class RoundRobinPolicy implements RoutingPolicy {
  readonly needsKey = false;
  private readonly current = new Map<string, number>();

  order<C extends Candidate>(candidates: C[]): C[] {
    if (candidates.length === 0) return [];
    const total = candidates.reduce((sum, c) => sum + c.weight, 0);
    let best = candidates[0];
    for (const c of candidates) {
      this.current.set(c.name, (this.current.get(c.name) ?? 0) + c.weight);
      if (this.current.get(c.name)! > this.current.get(best.name)!) best = c;
    }
    this.current.set(best.name, this.current.get(best.name)! - total);
    return [best, ...candidates.filter((c) => c !== best)];
  }
}
