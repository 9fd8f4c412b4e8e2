// The overview's 30-day chart as inline SVG: stacked bars of input tokens
// from cache, input tokens not from cache and output tokens per day, with
// the day's cost as a line on its own scale. Drawn on the server, so it needs
// no script and no library, and each bar has a title for screen readers and
// hover.
import { formatMicros } from '../billing/prices.js';
import { escapeHtml, trusted, type Html } from './html.js';
import type { DayTotals } from './usage-data.js';

// The same colours as the legend's classes in the stylesheet.
const COLORS = { hit: '#2f5bea', miss: '#93a8f4', output: '#f59e0b', cost: '#b45309' };
const W = 960;
const H = 260;
const PAD = { left: 56, right: 56, top: 16, bottom: 28 };
// Each axis reaches at least this far, so that its quarter ticks are whole numbers:
// an empty chart would otherwise be labelled in quarters of a token, and in
// fractions of a micro-unit that print as the same few digits. The cost axis
// otherwise scales to the data: a day's 0.0002 must not draw as a flat line.
const MIN_TOKEN_AXIS = 1_000;
const MIN_COST_AXIS_MICROS = 100;

/** The smallest of 1, 2, 2.5, 5 or 10 times a power of ten that reaches `n` (at least the axis minimums, so above 0). */
function niceMax(n: number): number {
  const magnitude = 10 ** Math.floor(Math.log10(n));
  return [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((m) => m >= n)!;
}

const compact = (n: number) => (n >= 1e6 ? `${+(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${+(n / 1e3).toFixed(1)}k` : String(n));

export function usageChart(days: DayTotals[], currency: string): Html {
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const tokenMax = niceMax(Math.max(MIN_TOKEN_AXIS, ...days.map((d) => d.cachedInput + d.uncachedInput + d.output)));
  const costMax = niceMax(Math.max(MIN_COST_AXIS_MICROS, ...days.map((d) => d.cost)));
  const slot = plotW / days.length;
  const barW = Math.max(2, slot * 0.7);
  const y = (v: number, max: number) => PAD.top + plotH - (v / max) * plotH;
  const parts: string[] = [];

  for (let i = 0; i <= 4; i++) {
    const v = (tokenMax / 4) * i;
    const yy = y(v, tokenMax).toFixed(1);
    parts.push(`<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${yy}" y2="${yy}" stroke="#e2e4e8"/>`);
    parts.push(`<text x="${PAD.left - 8}" y="${yy}" text-anchor="end" dominant-baseline="middle" font-size="11" fill="#5f6672">${compact(v)}</text>`);
    parts.push(`<text x="${W - PAD.right + 8}" y="${yy}" dominant-baseline="middle" font-size="11" fill="${COLORS.cost}">${formatMicros((costMax / 4) * i)}</text>`);
  }
  days.forEach((d, i) => {
    const x = PAD.left + i * slot + (slot - barW) / 2;
    let base = 0;
    const title = `${d.day}: ${d.cachedInput} input tokens from cache, ${d.uncachedInput} not from cache, ${d.output} output tokens, cost ${formatMicros(d.cost)} ${currency}`;
    parts.push(`<g><title>${escapeHtml(title)}</title>`);
    for (const [value, color] of [[d.cachedInput, COLORS.hit], [d.uncachedInput, COLORS.miss], [d.output, COLORS.output]] as const) {
      if (value > 0) {
        const top = y(base + value, tokenMax);
        parts.push(`<rect x="${x.toFixed(1)}" y="${top.toFixed(1)}" width="${barW.toFixed(1)}" height="${(y(base, tokenMax) - top).toFixed(1)}" fill="${color}" rx="1"/>`);
      }
      base += value;
    }
    parts.push('</g>');
    if (i % 5 === 0 || i === days.length - 1) {
      parts.push(`<text x="${(x + barW / 2).toFixed(1)}" y="${H - 8}" text-anchor="middle" font-size="11" fill="#5f6672">${d.day.slice(5)}</text>`);
    }
  });
  const line = days.map((d, i) => `${(PAD.left + i * slot + slot / 2).toFixed(1)},${y(d.cost, costMax).toFixed(1)}`).join(' ');
  parts.push(`<polyline points="${line}" fill="none" stroke="${COLORS.cost}" stroke-width="2"/>`);
  const summary = `Tokens and cost per day over the last ${days.length} days`;
  return trusted(
    `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${summary}"><title>${summary}</title>${parts.join('')}</svg>` +
      `<div class="legend"><span><i class="hit"></i>Input from cache</span><span><i class="miss"></i>Input not from cache</span>` +
      `<span><i class="output"></i>Output</span><span><i class="cost"></i>Cost (${escapeHtml(currency)}, right axis)</span></div>`,
  );
}
