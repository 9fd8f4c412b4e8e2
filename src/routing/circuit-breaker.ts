// A circuit breaker per endpoint, opened only on evidence that the endpoint,
// not a request, is at fault (as Envoy's outlier detection does): over the
// last `windowMs`, at least `failureThreshold` failures, making up at least
// `failureRate` of the outcomes, from at least `minCallers` different
// accounts. One tenant's requests, however many fail, cannot open a circuit
// that every tenant shares, unless another endpoint then served them: a
// failure that another endpoint does not repeat is the endpoint's, whoever
// sent the request, and `failureThreshold` of those are evidence enough
// (with the failure rate). The active probe is a caller of its own, and
// `failureThreshold` probe failures in a row open the circuit by themselves;
// a refused connection (nothing is listening) opens it at once. After
// `openMs` the circuit half-opens and lets one request (or a probe) test it:
// a success closes it, a failure opens it again.
export type BreakerState = 'closed' | 'open' | 'half_open';

export interface BreakerSettings {
  failureThreshold: number;
  failureRate: number;
  windowMs: number;
  minCallers: number;
  openMs: number;
}

/** Who saw an outcome: an account id, or the active probe. */
export const PROBE_CALLER = '(probe)';

/** The window is kept as this many slices, so that recording an outcome costs the same at any request rate. */
const SLICES = 10;

interface Slice {
  start: number;
  outcomes: number;
  failures: number;
  /** Failures of requests that another endpoint then served. */
  confirmed: number;
  failingCallers: Set<string>;
}

export class CircuitBreaker {
  private slices: Slice[] = [];
  private probeFailuresInARow = 0;
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

  onSuccess(caller: string): void {
    if (caller === PROBE_CALLER) this.probeFailuresInARow = 0;
    this.trialInFlight = false;
    if (this.opened) {
      this.opened = false;
      this.slices = [];
      return;
    }
    this.record(false, caller);
  }

  /**
   * `refused`: the connection itself was refused, so the endpoint is down now, not flaky. `confirmed`: another
   * endpoint then served the request, so the request was not the cause.
   */
  onFailure(caller: string, refused = false, confirmed = false): void {
    this.trialInFlight = false;
    if (caller === PROBE_CALLER) this.probeFailuresInARow++;
    this.record(true, caller, confirmed);
    // Open or half-open already: any failure (the trial's included) opens it anew.
    if (refused || this.opened || this.probeFailuresInARow >= this.settings.failureThreshold || this.evidenceIsEnough()) {
      this.opened = true;
      this.openedAt = this.now();
    }
  }

  /** A request that took the half-open trial ended with nothing to say of the endpoint (its own fault, or its client left). */
  onNoVerdict(): void {
    this.trialInFlight = false;
  }

  private record(failed: boolean, caller: string, confirmed = false): void {
    const now = this.now();
    const sliceMs = Math.max(1, this.settings.windowMs / SLICES);
    while (this.slices.length > 0 && this.slices[0].start <= now - this.settings.windowMs) this.slices.shift();
    let slice = this.slices.at(-1);
    if (!slice || now - slice.start >= sliceMs) {
      slice = { start: now, outcomes: 0, failures: 0, confirmed: 0, failingCallers: new Set() };
      this.slices.push(slice);
    }
    slice.outcomes++;
    if (failed) {
      slice.failures++;
      if (confirmed) slice.confirmed++;
      slice.failingCallers.add(caller);
    }
  }

  private evidenceIsEnough(): boolean {
    const { failureThreshold, failureRate, minCallers } = this.settings;
    const failing = new Set<string>();
    let failures = 0;
    let confirmed = 0;
    let outcomes = 0;
    for (const s of this.slices) {
      outcomes += s.outcomes;
      failures += s.failures;
      confirmed += s.confirmed;
      for (const caller of s.failingCallers) failing.add(caller);
    }
    return failures >= failureThreshold && failures >= failureRate * outcomes && (failing.size >= minCallers || confirmed >= failureThreshold);
  }
}
