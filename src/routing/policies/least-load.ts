// Least outstanding requests (in flight plus queued, the engine's own
// included) relative to weight, engines near a full KV cache last.
// Among equally loaded endpoints it rotates, so that an idle pool still
// spreads requests instead of sending every one to the first.
import { byLoad } from '../endpoint-score.js';
import type { Candidate, RoutingPolicy } from './policy.js';

export class LeastLoadPolicy implements RoutingPolicy {
  readonly needsKey = false;
  private turn = 0;

  order<C extends Candidate>(candidates: C[]): C[] {
    if (candidates.length === 0) return [];
    const start = this.turn++ % candidates.length;
    return byLoad([...candidates.slice(start), ...candidates.slice(0, start)]);
  }
}
