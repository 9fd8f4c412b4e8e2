// The two events every choice of a stream has besides its content: the one
// that opens it (the role, with an empty content or none) and the one that
// finishes it (an empty delta and the finish_reason). Each is read from the
// text by one regular expression, for about half what their JSON parse
// cost (bench/stream-stages.mjs, normalize).
//
// Only events in the exact shape below are read here, and they come out as
// the dialect's full parse would make them; any other (usage, logprobs, a
// stop_reason other than null, other framing) takes that full parse.
import type { ChoiceDelta, StreamEvent } from '../protocol/chat-response.js';
import { CHUNK_HEAD, CHUNK_TAIL } from './content-runs.js';
import type { QuickEvents } from './sse-parser.js';

/** The inside of each delta read here, as the upstream writes it, and what its parse comes to. */
const DELTAS: Record<string, () => ChoiceDelta['delta']> = {
  '"role":"assistant","content":""': () => ({ role: 'assistant', content: '' }),
  '"role":"assistant","content":null': () => ({ role: 'assistant', content: null }),
  '"role":"assistant"': () => ({ role: 'assistant' }),
  '"content":""': () => ({ content: '' }),
  '': () => ({}),
};

/** Groups: the choice's index (as JSON writes a number: no leading zero), its delta's inside, its finish_reason. */
const CHOICE_EDGE = new RegExp(
  CHUNK_HEAD(String.raw`(0|[1-9]\d*)`) + `(${Object.keys(DELTAS).join('|')})` + String.raw`\},(?:"logprobs":null,)?"finish_reason":(null|"[a-z_]+")` + CHUNK_TAIL,
  'y',
);

export const choiceEdges: QuickEvents<StreamEvent> = {
  read(text, start) {
    CHOICE_EDGE.lastIndex = start;
    const m = CHOICE_EDGE.exec(text);
    if (!m) return undefined;
    const finishReason = m[3] === 'null' ? null : m[3].slice(1, -1);
    const event: StreamEvent = { choices: [{ index: Number(m[1]), delta: DELTAS[m[2]](), logprobs: null, finish_reason: finishReason }] };
    return { event, end: CHOICE_EDGE.lastIndex };
  },
};
