// The policies a model's `routing.policy` names.
import type { PolicyName } from '../../config.js';
import type { KnownPrefixes } from '../known-prefixes.js';
import { LeastLoadPolicy } from './least-load.js';
import type { RoutingPolicy } from './policy.js';
import { PrefixAffinityPolicy, type PrefixAffinitySettings } from './prefix-affinity.js';
import { RoundRobinPolicy } from './round-robin.js';


/** `known`: the model's known prefixes, shared with the fleet where the gateway has Redis. */
export function createPolicy(name: PolicyName, settings: PrefixAffinitySettings, known?: KnownPrefixes): RoutingPolicy {
  switch (name) {
    case 'prefix-affinity':
      return new PrefixAffinityPolicy(settings, known);
    case 'least-load':
      return new LeastLoadPolicy();
    case 'round-robin':
      return new RoundRobinPolicy();
  }
}
