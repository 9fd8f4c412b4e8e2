// Ends a request's upstream work early: when its client leaves, or when
// shutdown's grace period is over. It does what an AbortSignal would for the
// calls and queue waits of one request, without the EventTarget that Node
// builds every AbortController on, a cost paid on every request.

export class Cancellation {
  cancelled = false;
  /** Why, as the upstream call's metrics give it (`error.type`). */
  reason: string | undefined;
  private readonly listeners = new Set<() => void>();

  cancel(reason = 'aborted'): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.reason = reason;
    for (const listener of this.listeners) listener();
    this.listeners.clear();
  }

  /** A cancellation of part of this work: cancelled with this one, or alone. */
  part(): Cancellation {
    const part = new Cancellation();
    if (this.cancelled) part.cancel(this.reason);
    else this.subscribe(() => part.cancel(this.reason));
    return part;
  }

  /**
   * Calls `listener` when the work is cancelled later; returns what
   * unsubscribes it. Never calls it from within this call: a listener run
   * before its caller has kept the unsubscriber could not unsubscribe itself,
   * so callers check `cancelled` first.
   */
  subscribe(listener: () => void): () => void {
    if (this.cancelled) return () => {};
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
