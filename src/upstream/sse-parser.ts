// An incremental server-sent-events parser that tolerates what real
// inference servers send: `data:` with or without the space, CRLF line ends,
// comment lines, multi-line data, and llama.cpp's non-standard `error:` field.

export interface SseEvent {
  /** The `event:` field; 'error' also when the server used an `error:` line. */
  event: string | undefined;
  data: string;
}

/** The events that dominate a stream, read straight from the text, whole events and their blank lines at once. */
export interface QuickEvents<T> {
  /**
   * What the events at `start` of `text` amount to, and where they end;
   * undefined where none are read this way. `ascii`: whether all of the
   * text is known to be ASCII (it came as bytes).
   */
  read(text: string, start: number, ascii: boolean): { event: T; end: number } | undefined;
  /** For a reader that reads ASCII bytes where they lie: then the parser decodes none of the bytes it reads this way. */
  bytes?: {
    /** What the events at `start` of `bytes` amount to, and where they end; undefined where none are read this way. */
    read(bytes: Buffer, start: number): { event: T; end: number } | undefined;
    /** What one whole event it left (`data: ` line and blank line, decoded) amounts to; undefined for a plain SSE event. */
    event(text: string): T | undefined;
  };
}

const LF = 0x0a;
const CR = 0x0d;
const DATA_PREFIX = Buffer.from('data: ');

/** Whether an event starts at `at` of `bytes` with `data: `. */
function startsWithData(bytes: Buffer, at: number): boolean {
  for (let i = 0; i < DATA_PREFIX.length; i++) if (bytes[at + i] !== DATA_PREFIX[i]) return false;
  return true;
}

/**
 * An incremental parser, fed the body as it arrives: text, or bytes where
 * the body is known to be ASCII (a byte per character). Bytes are read in
 * place while the quick path can read them (`quick.bytes`): only the events
 * outside its runs (a few per stream) are decoded, each on its own. Text,
 * and bytes the quick path cannot read, go through the same steps as text.
 */
export class SseParser<T = never> {
  /** What is left of the input past its last whole line, as text. */
  private buffer = '';
  /** The same as bytes, while the input is read as bytes: while every read came as bytes, and the quick path reads them. */
  private bytes: Buffer | undefined;
  /** Whether every read so far came as bytes. */
  private ascii = true;
  private event: string | undefined;
  private data: string[] = [];

  constructor(private readonly quick?: QuickEvents<T>) {}

  /** Feeds the next read: text, or ASCII bytes; returns the events it completed, read by the quick path or as plain SSE events. */
  push(read: string | Buffer): (SseEvent | T)[] {
    if (typeof read !== 'string') return this.ascii && this.quick?.bytes ? this.pushBytes(read) : this.pushText(read.toString('latin1'));
    // From the first text on, the input is read as text, what was left of the bytes first.
    this.ascii = false;
    if (this.bytes) this.buffer = this.bytes.toString('latin1');
    this.bytes = undefined;
    return this.pushText(read);
  }

  /** Ends the input: an event left without its blank line still counts. */
  end(): SseEvent[] {
    const out: SseEvent[] = [];
    const rest = this.bytes ? this.bytes.toString('latin1') : this.buffer;
    if (rest) this.line(rest, out);
    this.buffer = '';
    this.bytes = undefined;
    this.dispatch(out);
    return out;
  }

  /** Whether no event is half-read: the quick path reads whole events only. */
  private get idle(): boolean {
    return this.data.length === 0 && this.event === undefined;
  }

  private pushText(text: string): (SseEvent | T)[] {
    this.buffer += text;
    const out: (SseEvent | T)[] = [];
    let start = 0;
    for (;;) {
      if (this.quick && start < this.buffer.length && this.idle) {
        const quick = this.quick.read(this.buffer, start, this.ascii);
        if (quick) {
          out.push(quick.event);
          start = quick.end;
          continue;
        }
      }
      const nl = this.buffer.indexOf('\n', start);
      if (nl === -1) break;
      // Nearly every event is one `data: ` line and a blank line: taken whole, without the line-by-line parse.
      if (this.idle && this.buffer.charCodeAt(nl + 1) === LF && this.buffer.startsWith('data: ', start) && this.buffer.charCodeAt(nl - 1) !== CR) {
        out.push({ event: undefined, data: this.buffer.slice(start + 6, nl) });
        start = nl + 2;
        continue;
      }
      this.line(this.buffer.slice(start, nl), out);
      start = nl + 1;
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  private pushBytes(read: Buffer): (SseEvent | T)[] {
    const bytes = this.bytes?.length ? Buffer.concat([this.bytes, read]) : read;
    const quick = this.quick!.bytes!;
    const out: (SseEvent | T)[] = [];
    let start = 0;
    for (;;) {
      if (start < bytes.length && this.idle) {
        const run = quick.read(bytes, start);
        if (run) {
          out.push(run.event);
          start = run.end;
          continue;
        }
      }
      const nl = bytes.indexOf(LF, start);
      if (nl === -1) break;
      // One `data: ` line and a blank line, as in text, decoded alone: the quick path may still read it.
      if (this.idle && bytes[nl + 1] === LF && startsWithData(bytes, start) && bytes[nl - 1] !== CR) {
        const event = bytes.toString('latin1', start, nl + 2);
        out.push(quick.event(event) ?? { event: undefined, data: event.slice(6, -2) });
        start = nl + 2;
        continue;
      }
      this.line(bytes.toString('latin1', start, nl), out);
      start = nl + 1;
    }
    this.bytes = bytes.subarray(start);
    return out;
  }

  private line(line: string, out: (SseEvent | T)[]): void {
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') return this.dispatch(out);
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'error') {
      this.event = 'error';
      this.data.push(value);
    }
  }

  private dispatch(out: (SseEvent | T)[]): void {
    if (this.data.length > 0) out.push({ event: this.event, data: this.data.join('\n') });
    this.event = undefined;
    this.data = [];
  }
}
