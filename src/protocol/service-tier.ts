// Service tiers, through OpenAI's `service_tier`: `default`; `flex`, cheaper
// (half the model's prices unless the routing file says otherwise), admitted
// after every other tier and never to an endpoint's last slots, and refused
// with 429 when it waits too long; `priority`, admitted first, for keys an
// operator gave it. `auto` or nothing is the key's own tier.
export const SERVICE_TIERS = ['default', 'flex', 'priority'] as const;
export type ServiceTier = (typeof SERVICE_TIERS)[number];

/** In the order waiting requests are admitted. */
export const ADMISSION_ORDER: readonly ServiceTier[] = ['priority', 'default', 'flex'];

export const isServiceTier = (value: unknown): value is ServiceTier => SERVICE_TIERS.includes(value as ServiceTier);

/**
 * The tier that serves a request: the one it asks for, where its key may use it; `auto`, nothing or a name
 * Parley does not serve (OpenAI's `scale`) is the key's tier. Only a priority key is served at `priority`; any
 * other asking for it is served at `default`, and its reply says so.
 */
export function servingTier(asked: string | null | undefined, keyTier: ServiceTier): ServiceTier {
  if (asked === 'priority') return keyTier === 'priority' ? 'priority' : 'default';
  return isServiceTier(asked) ? asked : keyTier;
}
