// Money is integer micro-units of the account currency (1 USD = 1,000,000).
// Prices are given per million tokens, so one token at price P costs P
// micro-units; sums are kept in pico-units (a millionth of a micro-unit) so
// that fractional prices add up exactly, and rounded up once per request.
import type { Usage } from '../protocol/chat-response.js';

export const MICROS_PER_UNIT = 1_000_000;
const PICOS_PER_MICRO = 1_000_000;

export interface PricesPerMillion {
  inputCacheMiss: number;
  inputCacheHit: number;
  output: number;
}

/** Pico-units per token, exact for prices with up to six decimals. */
export interface TokenPrices {
  missPico: number;
  hitPico: number;
  outputPico: number;
}

export function tokenPrices(p: PricesPerMillion): TokenPrices {
  const pico = (perMillion: number) => Math.round(perMillion * PICOS_PER_MICRO);
  return { missPico: pico(p.inputCacheMiss), hitPico: pico(p.inputCacheHit), outputPico: pico(p.output) };
}

/** What a finished reply costs, in micro-units: cached prompt tokens at the hit price, the rest at the miss price. */
export function replyCost(prices: TokenPrices, usage: Usage): number {
  const cached = Math.min(usage.cached_tokens, usage.prompt_tokens);
  const pico = (usage.prompt_tokens - cached) * prices.missPico + cached * prices.hitPico + usage.completion_tokens * prices.outputPico;
  return Math.ceil(pico / PICOS_PER_MICRO);
}

/** "12.345678" from micro-units, for people and DeepSeek-shaped balances. */
export function formatMicros(micros: number, decimals = 2): string {
  const units = micros / MICROS_PER_UNIT;
  return units.toFixed(Math.max(decimals, micros % 10_000 === 0 ? decimals : 6)).replace(/(\.\d{2}\d*?)0+$/, '$1');
}

/**
 * The most an account's balance may be, and so the most one change of credit
 * may move: a billion currency units. Balances are counted in micro-units in
 * Lua's doubles and Redis's integers, exact to 2^53 (about 9e15); this bound
 * keeps a balance with its holds and charges well inside that.
 */
export const MAX_BALANCE_UNITS = 1_000_000_000;
export const MAX_BALANCE_MICROS = MAX_BALANCE_UNITS * MICROS_PER_UNIT;

/** An amount as an operator types it: digits, up to six decimals, at most MAX_BALANCE_UNITS. */
export const isAmountText = (text: string) => /^\d{1,10}(\.\d{1,6})?$/.test(text) && Number(text) <= MAX_BALANCE_UNITS;

/** Micro-units from a decimal amount an operator typed ("25", "0.50"). */
export function parseAmount(text: string): number {
  if (!isAmountText(text)) throw new Error(`"${text}" is not an amount (digits, up to six decimals, at most ${MAX_BALANCE_UNITS})`);
  return Math.round(Number(text) * MICROS_PER_UNIT);
}
