// The policies a model's `routing.policy` names.
import { LeastLoadPolicy } from './least-load.js';
import type { RoutingPolicy } from './policy.js';
import { PrefixAffinityPolicy } from './prefix-affinity.js';
import { RoundRobinPolicy } from './round-robin.js';

export const POLICY_NAMES = ['prefix-affinity', 'least-load', 'round-robin'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export function createPolicy(name: PolicyName, settings: { maxImbalance: number }): RoutingPolicy {
  switch (name) {
    case 'prefix-affinity':
      return new PrefixAffinityPolicy(settings);
    case 'least-load':
      return new LeastLoadPolicy();
    case 'round-robin':
      return new RoundRobinPolicy();
  }
}
