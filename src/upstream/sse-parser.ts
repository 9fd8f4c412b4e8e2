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
   * undefined where none are read this way. `bytes`: the text as it came,
   * a byte per character, where all of it is known to be ASCII (undefined
   * when not known).
   */
  read(text: string, start: number, bytes?: Buffer): { event: T; end: number } | undefined;
}

export class SseParser<T = never> {
  private buffer = '';
  /** `buffer` as bytes, while all of it is known to be ASCII. */
  private bytes: Buffer | undefined;
  private event: string | undefined;
  private data: string[] = [];

  constructor(private readonly quick?: QuickEvents<T>) {}

  /**
   * Feeds text, with its `bytes` where it is known to be all ASCII; returns
   * the events it completed: read by the quick path, or as plain SSE events.
   */
  push(text: string, bytes?: Buffer): (SseEvent | T)[] {
    // The quick path may read bytes where it would copy text; they are kept while every read held in the buffer came with them.
    this.bytes = bytes && (this.buffer === '' ? bytes : this.bytes && Buffer.concat([this.bytes, bytes]));
    this.buffer += text;
    const out: (SseEvent | T)[] = [];
    let start = 0;
    for (;;) {
      if (this.quick && start < this.buffer.length && this.data.length === 0 && this.event === undefined) {
        const quick = this.quick.read(this.buffer, start, this.bytes);
        if (quick) {
          out.push(quick.event);
          start = quick.end;
          continue;
        }
      }
      const nl = this.buffer.indexOf('\n', start);
      if (nl === -1) break;
      // Nearly every event is one `data: ` line and a blank line: taken whole, without the line-by-line parse.
      if (this.data.length === 0 && this.event === undefined && this.buffer.charCodeAt(nl + 1) === 0x0a && this.buffer.startsWith('data: ', start) && this.buffer.charCodeAt(nl - 1) !== 0x0d) {
        out.push({ event: undefined, data: this.buffer.slice(start + 6, nl) });
        start = nl + 2;
        continue;
      }
      let line = this.buffer.slice(start, nl);
      start = nl + 1;
      if (line.endsWith('\r')) line = line.slice(0, -1);
      this.line(line, out);
    }
    this.buffer = this.buffer.slice(start);
    this.bytes = this.bytes?.subarray(start);
    return out;
  }

  /** Ends the input: an event left without its blank line still counts. */
  end(): SseEvent[] {
    const out: SseEvent[] = [];
    if (this.buffer) this.line(this.buffer, out);
    this.buffer = '';
    this.bytes = undefined;
    this.dispatch(out);
    return out;
  }

  private line(line: string, out: (SseEvent | T)[]): void {
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
