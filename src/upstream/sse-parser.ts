// An incremental server-sent-events parser that tolerates what real
// inference servers send: `data:` with or without the space, CRLF line ends,
// comment lines and multi-line data. A dialect gives it what its upstream
// adds: a quick path, whose events come out already normalized, and a field
// of its own that carries an error event.
import type { StreamEvent } from '../protocol/chat-response.js';
import type { QuickRead } from './quick-events.js';

export interface SseEvent {
  /** The `event:` field; 'error' also for the dialect's own error field. */
  event: string | undefined;
  data: string;
}

/** What an upstream's streams add to plain server-sent events, as its dialect says. */
export interface SseFraming {
  /** Reads the events at a point of the text straight into normalized ones, where it can. */
  quick?: QuickRead;
  /** A field of the upstream's own whose value is an error event's data. */
  errorField?: string;
}

/**
 * The most characters one event may take, its lines and data together: far
 * past any real event (a chunk of a few tokens, a tool call's arguments), and
 * a bound on what an upstream that never ends a line can make Parley keep.
 */
export const MAX_EVENT_CHARS = 8 * 1024 * 1024;

/** Fed the body's text as it arrives; returns the events each read completes, or throws on an event past MAX_EVENT_CHARS. */
export class SseParser {
  /** What is left of the input past its last whole line. */
  private buffer = '';
  private event: string | undefined;
  private data: string[] = [];
  /** Characters in `data`. */
  private dataChars = 0;

  constructor(private readonly framing: SseFraming = {}) {}

  push(text: string): (SseEvent | StreamEvent)[] {
    this.buffer += text;
    const out: (SseEvent | StreamEvent)[] = [];
    let start = 0;
    for (;;) {
      if (this.framing.quick && this.idle && start < this.buffer.length) {
        const read = this.framing.quick(this.buffer, start);
        if (read) {
          out.push(read.event);
          start = read.end;
          continue;
        }
      }
      const nl = this.buffer.indexOf('\n', start);
      if (nl === -1) break;
      this.line(this.buffer.slice(start, nl), out);
      start = nl + 1;
    }
    this.buffer = this.buffer.slice(start);
    if (this.buffer.length + this.dataChars > MAX_EVENT_CHARS) throw new Error(`the upstream sent an event longer than ${MAX_EVENT_CHARS} characters`);
    return out;
  }

  /** Ends the input: an event left without its blank line still counts. */
  end(): SseEvent[] {
    const out: SseEvent[] = [];
    if (this.buffer) this.line(this.buffer, out);
    this.buffer = '';
    this.dispatch(out);
    return out;
  }

  /** Whether no event is half-read. */
  private get idle(): boolean {
    return this.data.length === 0 && this.event === undefined;
  }

  private line(line: string, out: Pick<SseEvent[], 'push'>): void {
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') return this.dispatch(out);
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.addData(value);
    else if (field === 'event') this.event = value;
    else if (field === this.framing.errorField) {
      this.event = 'error';
      this.addData(value);
    }
  }

  private addData(value: string): void {
    this.data.push(value);
    this.dataChars += value.length;
  }

  private dispatch(out: Pick<SseEvent[], 'push'>): void {
    if (this.data.length > 0) out.push({ event: this.event, data: this.data.join('\n') });
    this.event = undefined;
    this.data = [];
    this.dataChars = 0;
  }
}
