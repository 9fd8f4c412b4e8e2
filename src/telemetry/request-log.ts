// A request's log line and span attributes, from its record: one JSON line
// on stdout per generation (the Kubernetes way: the node's log agent takes
// it), and the GenAI conventions' span attributes. Ids, counts and codes
// only: never an API key, a prompt or a reply.
//
// Lines are written together, FLUSH_MS after the first of them or once
// FLUSH_BYTES have gathered, and at once when the process exits or the
// gateway closes: a write to stdout is a system call that blocks (stdout is
// a pipe or a file), and its reader wakes for each. Against a write per
// line, `node bench/fast-paths.mjs batched-log-lines` gave 1.26 and 1.07
// times the whole requests/s at 32 connections in two runs (2026-11-26). A
// process killed with SIGKILL loses at most FLUSH_MS of lines; its usage
// events are in Redis.
import type { Attributes } from '@opentelemetry/api';
import { GEN_AI_OPERATIONS, type RequestRecord } from './request-record.js';

const FLUSH_MS = 100;
const FLUSH_BYTES = 64 * 1024;
/**
 * The most log text left in memory for stdout's reader. Node queues what a pipe cannot take at once, without
 * bound: a log agent that stalls would have each request's line kept until the process ran out of memory. Past
 * this, lines are dropped and counted (`parley_request_log_lines_dropped`); the usage events are in Redis.
 */
const MAX_UNWRITTEN_BYTES = 16 * 1024 * 1024;

let pending = '';
let pendingLines = 0;
let dropped = 0;
let flushTimer: NodeJS.Timeout | undefined;

/** Request log lines dropped because stdout's reader fell MAX_UNWRITTEN_BYTES behind. */
export const requestLogLinesDropped = (): number => dropped;

/** Writes the lines gathered so far. */
export function flushRequestLog(): void {
  clearTimeout(flushTimer);
  flushTimer = undefined;
  if (pending === '') return;
  const text = pending;
  const lines = pendingLines;
  pending = '';
  pendingLines = 0;
  if (process.stdout.writableLength >= MAX_UNWRITTEN_BYTES) dropped += lines;
  else process.stdout.write(text);
}
process.once('exit', flushRequestLog);

function writeLine(line: string): void {
  pending += line;
  pendingLines++;
  if (pending.length >= FLUSH_BYTES) flushRequestLog();
  else flushTimer ??= setTimeout(flushRequestLog, FLUSH_MS).unref();
}

/** A phase's ms to a tenth: a gateway's own share of a request is a millisecond or two. */
const tenths = (ms: number | undefined) => (ms === undefined ? undefined : Math.round(ms * 10) / 10);

export function writeRequestLog(r: RequestRecord, status: number, errorType: string | undefined, seconds: number): void {
  const line = {
    time: new Date().toISOString(),
    level: 'info',
    msg: 'request',
    request_id: r.id,
    account: r.account,
    key_id: r.keyId,
    api: r.api,
    model: r.model,
    served_model: r.servedModel,
    service_tier: r.serviceTier,
    endpoint: r.endpoint,
    status,
    error: errorType,
    prompt_tokens: r.promptTokens,
    cached_tokens: r.cachedTokens,
    completion_tokens: r.completionTokens,
    cost_micros: r.cost,
    admitted_ms: tenths(r.admittedMs),
    upstream_sent_ms: tenths(r.sentMs),
    upstream_answered_ms: tenths(r.answeredMs),
    first_byte_ms: r.firstByteMs === undefined ? undefined : Math.round(r.firstByteMs),
    total_ms: Math.round(seconds * 1000),
    attempts: r.attempts,
  };
  writeLine(`${JSON.stringify(line)}\n`);
}

export function genAiSpanAttributes(r: RequestRecord): Attributes {
  const attributes: Attributes = { 'gen_ai.operation.name': GEN_AI_OPERATIONS[r.api!], 'gen_ai.request.model': r.model, 'parley.api': r.api };
  if (r.servedModel) attributes['gen_ai.response.model'] = r.servedModel;
  if (r.replyId) attributes['gen_ai.response.id'] = r.replyId;
  if (r.finishReasons) attributes['gen_ai.response.finish_reasons'] = r.finishReasons;
  if (r.promptTokens !== undefined) {
    attributes['gen_ai.usage.input_tokens'] = r.promptTokens;
    attributes['gen_ai.usage.output_tokens'] = r.completionTokens ?? 0;
    attributes['gen_ai.usage.cache_read.input_tokens'] = r.cachedTokens ?? 0;
  }
  if (r.serviceTier) attributes['openai.response.service_tier'] = r.serviceTier;
  return attributes;
}
