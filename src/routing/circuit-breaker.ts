// A circuit breaker per endpoint: after `failureThreshold` failures in a row
// (or one refused connection: nothing is listening) it opens and the
// endpoint gets no traffic; after `openMs` it half-opens and lets one request
// (or an active probe) test it; a success closes it, a failure opens it again.
export type BreakerState = 'closed' | 'open' | 'half_open';

export interface BreakerSettings {
  failureThreshold: number;
  openMs: number;
}

export class CircuitBreaker {
  private failuresInARow = 0;
  private openedAt = 0;
  private opened = false;
  private trialInFlight = false;

  /** Replaced when the routing file is reloaded; the circuit's state stays. */
  settings: BreakerSettings;

  constructor(settings: BreakerSettings, private readonly now: () => number = Date.now) {
    this.settings = settings;
  }

  get state(): BreakerState {
    if (!this.opened) return 'closed';
    return this.now() - this.openedAt >= this.settings.openMs ? 'half_open' : 'open';
  }

  /** Whether a request may go to the endpoint now; in half-open, only one trial at a time. */
  allowRequest(): boolean {
    const state = this.state;
    if (state === 'closed') return true;
    if (state === 'open' || this.trialInFlight) return false;
    this.trialInFlight = true;
    return true;
  }

  /** Like allowRequest, without taking the half-open trial: for ordering candidates. */
  isAvailable(): boolean {
    const state = this.state;
    return state === 'closed' || (state === 'half_open' && !this.trialInFlight);
  }

  onSuccess(): void {
    this.failuresInARow = 0;
    this.opened = false;
    this.trialInFlight = false;
  }

  /** `refused`: the connection itself was refused, so the endpoint is down now, not flaky. */
  onFailure(refused = false): void {
    this.trialInFlight = false;
    this.failuresInARow++;
    if (refused || this.failuresInARow >= this.settings.failureThreshold || this.opened) {
      this.opened = true;
      this.openedAt = this.now();
    }
  }
}
