import { describe, expect, it } from 'vitest';
import { usageChart } from '../../src/platform/usage-chart.js';
import type { DayTotals } from '../../src/platform/usage-data.js';

const day = (n: number, cost: number): DayTotals => ({ day: `2026-11-${String(n).padStart(2, '0')}`, requests: 1, cachedInput: 10, uncachedInput: 20, output: 30, cost });

/** An axis's labels, bottom to top: the left one (tokens) or the right one (cost). */
function axis(days: DayTotals[], side: 'tokens' | 'cost'): string[] {
  const svg = String(usageChart(days, 'USD'));
  const label = side === 'tokens' ? /<text [^>]*text-anchor="end"[^>]*>([^<]*)<\/text>/g : /<text [^>]*fill="#b45309">([^<]*)<\/text>/g;
  return [...svg.matchAll(label)].map((m) => m[1]);
}

describe('the usage chart', () => {
  it('labels both axes in whole, distinct steps when little was used', () => {
    const quiet = [{ ...day(1, 0), cachedInput: 0, uncachedInput: 0, output: 0 }, day(2, 0)];
    expect(axis(quiet, 'tokens')).toEqual(['0', '250', '500', '750', '1k']);
    expect(axis(quiet, 'cost')).toEqual(['0.00', '0.000025', '0.00005', '0.000075', '0.0001']);
  });

  it('scales the cost axis to a tiny spend, so that it draws above zero', () => {
    const svg = String(usageChart([day(1, 0), day(2, 200)], 'USD'));
    expect(axis([day(1, 0), day(2, 200)], 'cost')).toEqual(['0.00', '0.00005', '0.0001', '0.00015', '0.0002']);
    // The cost line's second point is at the top of the plot (y 16), not on the zero line (y 232).
    const points = /<polyline points="([^"]+)"/.exec(svg)![1].split(' ').map((p) => Number(p.split(',')[1]));
    expect(points).toEqual([232, 16]);
  });

  it('scales each axis to the busiest and the dearest day', () => {
    const busy = [{ ...day(1, 1_200_000), output: 30_000 }, day(2, 300_000)];
    expect(axis(busy, 'tokens')).toEqual(['0', '12.5k', '25k', '37.5k', '50k']);
    expect(axis(busy, 'cost')).toEqual(['0.00', '0.50', '1.00', '1.50', '2.00']);
  });
});
