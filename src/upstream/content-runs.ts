// Runs of plain content events: most of any streamed reply, read and
// rewritten in one step each rather than event by event.
//
// A plain content event is one choice, a piece of content, nothing else, as
// a whole SSE event. The piece stays the JSON string literal the upstream
// wrote: the grammar admits valid literals only, so it is copied as it is.
// Any other event (an empty piece too), or other framing, takes the dialect's
// full parse.
//
// Two readers accept exactly the same runs and render them to the same
// text. The regular-expression one needs nothing but JavaScript: it matches
// a run in one step and renders it with one replace of the framing between
// its pieces. The native one (native/content-runs.cc, built where the
// machine has a C++ compiler) reads ASCII replies from their bytes, where
// they lie, for less than that costs the gateway's one JavaScript thread,
// and renders a flat string, not a rope.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { StreamEvent } from '../protocol/chat-response.js';
import type { QuickEvents } from './sse-parser.js';

// The fields around a chunk's one choice that Parley drops, in any order,
// where they say nothing: OpenAI's service_tier, system_fingerprint and
// obfuscation (random padding), vLLM's stop_reason and token_ids (on every
// chunk since 0.10.2) and prompt_token_ids (its first), SGLang's
// matched_stop, and a usage field with no usage.
/** An OpenAI-shaped chunk event of one choice, up to the inside of its delta; `index` matches the choice's index. */
export const CHUNK_HEAD = (index: string) =>
  String.raw`data: \{"id":"[^"\\]*","object":"chat\.completion\.chunk","created":\d+,"model":"[^"\\]*",(?:"(?:service_tier|system_fingerprint)":(?:null|"[^"\\]*"),)*"choices":\[\{"index":${index},"delta":\{`;
/** A chunk event from after its choice's finish_reason to its end. */
export const CHUNK_TAIL = String.raw`(?:,"(?:stop_reason|matched_stop|token_ids)":null)*\}\](?:,"(?:usage|prompt_token_ids)":null|,"obfuscation":"[^"\\]*")*\}\n\n`;
const EVENT_OPENING = (index: string) => CHUNK_HEAD(index) + '"content":';
const EVENT_CLOSING = String.raw`\},"logprobs":null,"finish_reason":null` + CHUNK_TAIL;
/** A JSON string literal with some text in it. */
const JSON_STRING = String.raw`"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})+"`;
const plainContentEvent = (index: string) => EVENT_OPENING(index) + JSON_STRING + EVENT_CLOSING;
/** Consecutive plain content events of one choice, its index in group 1. */
const PLAIN_CONTENT_RUN = new RegExp(`${plainContentEvent(String.raw`(\d+)`)}(?:${plainContentEvent(String.raw`\1`)})*`, 'y');
/**
 * In a run, the framing from the end of one piece's literal to the start of
 * the next one's. A literal cannot hold it: its quotes are all escaped.
 */
const BETWEEN_PIECES = new RegExp(EVENT_CLOSING + EVENT_OPENING(String.raw`\d+`), 'g');
/** Text just before a run's first literal, and from its last one's closing quote on: a literal holds no unescaped quote, so neither is found inside one. */
const BEFORE_FIRST_PIECE = '"delta":{"content":';
const AFTER_LAST_PIECE = '"},"logprobs":null,';

/** How many events a run holds: each ends in a blank line, and inside a JSON literal a newline is escaped. */
function eventsIn(run: string): number {
  let count = 0;
  // A search for one character is a memchr, several times quicker than one for two.
  for (let at = run.indexOf('\n'); at !== -1; at = run.indexOf('\n', at + 2)) count++;
  return count;
}

/** Text taken as it is inside a replacement template, where `$` has meanings. */
const literalReplacement = (text: string) => text.replaceAll('$', '$$$$');

/** Reads runs with the regular-expression engine alone, no JavaScript per event. */
export const regexContentRuns: QuickEvents<StreamEvent> = {
  read(text, start, ascii) {
    PLAIN_CONTENT_RUN.lastIndex = start;
    const m = PLAIN_CONTENT_RUN.exec(text);
    if (!m) return undefined;
    const source = m[0];
    const event: StreamEvent = {
      content: {
        index: Number(m[1]),
        pieces: eventsIn(source),
        ascii,
        render(before, after) {
          const pieces = source.slice(source.indexOf(BEFORE_FIRST_PIECE) + BEFORE_FIRST_PIECE.length, source.lastIndexOf(AFTER_LAST_PIECE) + 1);
          return before + pieces.replace(BETWEEN_PIECES, literalReplacement(after + before)) + after;
        },
      },
    };
    return { event, end: PLAIN_CONTENT_RUN.lastIndex };
  },
};

interface NativeReader {
  /** The run at `start` of `bytes` (ASCII): its literals, each followed by a NUL; `info` gets [bytes, index, pieces]. */
  scan(bytes: Buffer, start: number, info: Float64Array): string | null;
  /** Every literal between `before` and `after`, all joined. */
  render(literals: string, before: string, after: string): string;
}

/** The built native reader, unless it is switched off (PARLEY_NATIVE_STREAMS=0) or could not be built or loaded here; and why not. */
function loadNativeReader(): { reader?: NativeReader; unused?: string } {
  if (process.env.PARLEY_NATIVE_STREAMS === '0') return { unused: 'switched off by PARLEY_NATIVE_STREAMS=0' };
  const built = fileURLToPath(new URL('../../build/Release/content_runs.node', import.meta.url));
  if (!existsSync(built)) return { unused: 'not built here: npm run build builds it where python3, make and a C++ compiler are installed' };
  try {
    return { reader: createRequire(import.meta.url)(built) as NativeReader };
  } catch (err) {
    return { unused: `built but not loaded: ${(err as Error).message.split('\n')[0]}` };
  }
}

const { reader: nativeReader, unused } = loadNativeReader();
/** What reads streams in this process, for the operator. */
export const streamReader = nativeReader ? 'the native reader' : `the JavaScript path (the native reader is ${unused})`;
const scanned = new Float64Array(3);

/** Reads runs of ASCII bytes natively, where they lie, and text with the regular expressions; undefined where the native reader is not built. */
export const nativeContentRuns: QuickEvents<StreamEvent> | undefined = nativeReader && {
  read: regexContentRuns.read,
  bytes: {
    read(bytes, start) {
      const literals = nativeReader.scan(bytes, start, scanned);
      if (!literals) return undefined;
      const event: StreamEvent = {
        content: { index: scanned[1], pieces: scanned[2], ascii: true, render: (before, after) => nativeReader.render(literals, before, after) },
      };
      return { event, end: start + scanned[0] };
    },
    // A single event is a run only if the native reader read it as one.
    event: () => undefined,
  },
};

/** The reader streams are read with: the native one where it is built. */
export const plainContentRuns: QuickEvents<StreamEvent> = nativeContentRuns ?? regexContentRuns;
