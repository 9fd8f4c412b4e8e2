import { describe, expect, it } from 'vitest';
import { Cancellation } from '../../src/upstream/cancellation.js';

describe('Cancellation', () => {
  it('calls each listener once when cancelled, and not one that unsubscribed', () => {
    const c = new Cancellation();
    const calls: string[] = [];
    c.subscribe(() => calls.push('kept'));
    c.subscribe(() => calls.push('dropped'))();
    c.cancel();
    c.cancel();
    expect(calls).toEqual(['kept']);
  });

  it('never calls a listener from within subscribe, even once cancelled: the caller checks first', () => {
    const c = new Cancellation();
    c.cancel();
    let called = false;
    const unsubscribe = c.subscribe(() => {
      called = true;
    });
    expect(called).toBe(false);
    expect(unsubscribe).toBeTypeOf('function');
  });
});
