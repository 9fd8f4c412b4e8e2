// A circuit breaker per endpoint, opened only on evidence that the endpoint,
// not a request, is at fault. A request's failure (an error the upstream
// answered, a stall) may be the request's own doing: an out-of-vocabulary
// token, a prompt the engine chokes on. Such failures only raise a
// suspicion, when over the last `windowMs` there are at least
// `failureThreshold` of them, making up at least `failureRate` of the
// outcomes, from at least `minCallers` different accounts (or confirmed:
// another endpoint then served the request). A suspicion is settled by a
// request of Parley's own, the active probe, sent at once (`verify`): the
// probe failing opens the circuit; the probe, or any request, succeeding
// clears the suspicion and the failures with it, since an endpoint that
// serves other requests meanwhile is not broken. So no tenant's requests,
// however many and from however many accounts, open a circuit every tenant
// shares, with one endpoint or several, on one replica or many. The probe is
// a caller of its own: `failureThreshold` probe failures in a row open the
// circuit by themselves, and so does a refused connection (nothing is
// listening), whoever saw it. After `openMs` the circuit half-opens and lets
// one request (or a probe) test it: a success closes it, a probe's failure
// opens it again, and a request's raises a suspicion.
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
  /** Request failures are evidence enough, unless a probe shows the endpoint serving: one is on its way. */
  private suspected = false;
  /** Sends the probe that settles a suspicion (the router's); without one, the next periodic probe settles it. */
  verify: (() => void) | undefined;

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
    if (this.opened || this.suspected) {
      // The endpoint serves: the failures in the window were their requests' own.
      this.opened = false;
      this.suspected = false;
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
    this.record(true, caller, confirmed);
    if (refused) return this.open();
    if (caller === PROBE_CALLER) {
      this.probeFailuresInARow++;
      // Open or half-open already, or suspected: the probe's failure is the endpoint's.
      if (this.opened || this.suspected || this.probeFailuresInARow >= this.settings.failureThreshold || this.evidenceIsEnough()) this.open();
      return;
    }
    if (this.suspected || !(this.opened || this.evidenceIsEnough())) return;
    this.suspected = true;
    this.verify?.();
  }

  private open(): void {
    this.opened = true;
    this.suspected = false;
    this.openedAt = this.now();
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
