// The events that make up nearly all of a streamed reply, read straight from
// the text by regular expressions instead of one JSON parse each: runs of
// plain content events (one choice, a piece of content, nothing else), read
// and rewritten in one step per run, and the events that open and finish a
// choice. `node bench/fast-paths.mjs quick-path` gave Parley 2.86 times the
// streamed requests/s it served with every event parsed as JSON (2026-11-26,
// 256-token replies, 32 connections).
//
// Only events in exactly the shape below are read here, and they come out
// as the dialect's full parse would make them; any other takes that parse.
// Each dialect names the fields its server writes around a chunk that say
// nothing (ChunkFraming): they are the one thing that differs between them.
import type { ChoiceDelta, StreamEvent } from '../protocol/chat-response.js';

/** Fields an upstream writes around every chunk that Parley drops, as each dialect names them. */
export interface ChunkFraming {
  /** Between `model` and `choices`, with a string or null value (OpenAI's service_tier, system_fingerprint). */
  head?: string[];
  /** After a choice's finish_reason, always null (vLLM's stop_reason and token_ids, SGLang's matched_stop). */
  choiceTail?: string[];
  /** After `choices`, null (usage, vLLM's prompt_token_ids). */
  tailNull?: string[];
  /** After `choices`, a string (OpenAI's obfuscation padding). */
  tailString?: string[];
}

/** The events at `start` of `text` the quick path reads, and where they end; undefined where it reads none. */
export type QuickRead = (text: string, start: number) => { event: StreamEvent; end: number } | undefined;

const names = (fields: string[] | undefined) => (fields?.length ? fields.join('|') : '(?!)');

/** A JSON string literal with some text in it. */
const JSON_STRING = String.raw`"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})+"`;
/** Text just before a run's first literal, and from its last one's closing quote on: a literal holds no unescaped quote, so neither is found inside one. */
const BEFORE_FIRST_PIECE = '"delta":{"content":';
const AFTER_LAST_PIECE = '"},"logprobs":null,';

/** The inside of each delta the choice edges read, as an upstream writes it, and what its parse comes to. */
const EDGE_DELTAS: Record<string, () => ChoiceDelta['delta']> = {
  '"role":"assistant","content":""': () => ({ role: 'assistant', content: '' }),
  '"role":"assistant","content":null': () => ({ role: 'assistant' }),
  '"role":"assistant"': () => ({ role: 'assistant' }),
  '"content":""': () => ({ content: '' }),
  '': () => ({}),
};

/** How many events a run holds: each ends in a blank line, and inside a JSON literal a newline is escaped. */
function eventsIn(run: string): number {
  let count = 0;
  for (let at = run.indexOf('\n'); at !== -1; at = run.indexOf('\n', at + 2)) count++;
  return count;
}

/** Text taken as it is inside a replacement template, where `$` has meanings. */
const literalReplacement = (text: string) => text.replaceAll('$', '$$$$');

/** The quick path for streams framed as `framing` says. */
export function quickEvents(framing: ChunkFraming): QuickRead {
  const head = (index: string) =>
    String.raw`data: \{"id":"[^"\\]*","object":"chat\.completion\.chunk","created":\d+,"model":"[^"\\]*",(?:"(?:${names(framing.head)})":(?:null|"[^"\\]*"),)*"choices":\[\{"index":${index},"delta":\{`;
  const tail = String.raw`(?:,"(?:${names(framing.choiceTail)})":null)*\}\](?:,"(?:${names(framing.tailNull)})":null|,"(?:${names(framing.tailString)})":"[^"\\]*")*\}\n\n`;
  const opening = (index: string) => head(index) + '"content":';
  const closing = String.raw`\},"logprobs":null,"finish_reason":null` + tail;
  const plainContent = (index: string) => opening(index) + JSON_STRING + closing;
  /** Consecutive plain content events of one choice, its index in group 1. */
  const run = new RegExp(`${plainContent(String.raw`(\d+)`)}(?:${plainContent(String.raw`\1`)})*`, 'y');
  /** In a run, the framing from the end of one piece's literal to the start of the next one's. */
  const betweenPieces = new RegExp(closing + opening(String.raw`\d+`), 'g');
  /** Groups: the choice's index, its delta's inside, its finish_reason. */
  const edge = new RegExp(
    head(String.raw`(0|[1-9]\d*)`) + `(${Object.keys(EDGE_DELTAS).join('|')})` + String.raw`\},(?:"logprobs":null,)?"finish_reason":(null|"[a-z_]+")` + tail,
    'y',
  );

  const readRun: QuickRead = (text, start) => {
    run.lastIndex = start;
    const m = run.exec(text);
    if (!m) return undefined;
    const source = m[0];
    const render = (before: string, after: string) => {
      const pieces = source.slice(source.indexOf(BEFORE_FIRST_PIECE) + BEFORE_FIRST_PIECE.length, source.lastIndexOf(AFTER_LAST_PIECE) + 1);
      return before + pieces.replace(betweenPieces, literalReplacement(after + before)) + after;
    };
    return { event: { content: { index: Number(m[1]), pieces: eventsIn(source), render } }, end: run.lastIndex };
  };
  const readEdge: QuickRead = (text, start) => {
    edge.lastIndex = start;
    const m = edge.exec(text);
    if (!m) return undefined;
    const finishReason = m[3] === 'null' ? null : m[3].slice(1, -1);
    return { event: { choices: [{ index: Number(m[1]), delta: EDGE_DELTAS[m[2]](), logprobs: null, finish_reason: finishReason }] }, end: edge.lastIndex };
  };
  return (text, start) => readRun(text, start) ?? readEdge(text, start);
}
