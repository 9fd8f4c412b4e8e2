import { describe, expect, it } from 'vitest';
import { SseParser, type QuickEvents } from '../../src/upstream/sse-parser.js';

/** ASCII text's bytes, as the body hands them on. */
const ascii = (text: string) => Buffer.from(text, 'latin1');

describe('SseParser', () => {
  it('reads data with and without the space after the colon, and CRLF line ends', () => {
    const p = new SseParser();
    expect(p.push('data: {"a":1}\r\n\r\ndata:{"b":2}\n\n')).toEqual([
      { event: undefined, data: '{"a":1}' },
      { event: undefined, data: '{"b":2}' },
    ]);
  });

  it('joins an event split across reads and skips comment lines', () => {
    const p = new SseParser();
    expect(p.push(': keep-alive\n\nda')).toEqual([]);
    expect(p.push('ta: hel')).toEqual([]);
    expect(p.push('lo\n\n')).toEqual([{ event: undefined, data: 'hello' }]);
  });

  it('keeps the event name and joins multi-line data', () => {
    const p = new SseParser();
    expect(p.push('event: error\ndata: line1\ndata: line2\n\n')).toEqual([{ event: 'error', data: 'line1\nline2' }]);
  });

  it("treats llama.cpp's `error:` line as an error event", () => {
    expect(new SseParser().push('error: {"message":"boom"}\n\n')).toEqual([{ event: 'error', data: '{"message":"boom"}' }]);
  });

  it('delivers a last event that has no blank line after it when the input ends', () => {
    const p = new SseParser();
    expect(p.push('data: [DONE]')).toEqual([]);
    expect(p.end()).toEqual([{ event: undefined, data: '[DONE]' }]);
  });
});

describe('SseParser with a quick path', () => {
  const pattern = /data: n(\d+)\n\n/y;
  const quick = {
    read(text: string, start: number, ascii: boolean) {
      pattern.lastIndex = start;
      const m = pattern.exec(text);
      return m ? { event: { n: Number(m[1]), ascii }, end: pattern.lastIndex } : undefined;
    },
  };

  it('reads matching events whole and the rest the ordinary way, in order', () => {
    const p = new SseParser(quick);
    expect(p.push('data: n1\n\n: comment\n\nevent: x\ndata: y\n\ndata: n2\n\n')).toEqual([{ n: 1, ascii: false }, { event: 'x', data: 'y' }, { n: 2, ascii: false }]);
  });

  it('waits for the rest of an event split across reads, and does not read a half-parsed event quickly', () => {
    const p = new SseParser(quick);
    expect(p.push('data: n')).toEqual([]);
    expect(p.push('3\n')).toEqual([]);
    expect(p.push('\ndata: n4\n\n')).toEqual([{ event: undefined, data: 'n3' }, { n: 4, ascii: false }]);
  });

  it('reads bytes as text where the quick path reads no bytes, telling it the text is ASCII until text comes', () => {
    const p = new SseParser(quick);
    expect(p.push(ascii('data: n1\n\ndata: n'))).toEqual([{ n: 1, ascii: true }]);
    expect(p.push(ascii('2\n\ndata: x\n\n'))).toEqual([{ n: 2, ascii: true }, { event: undefined, data: 'x' }]);
    expect(p.push('data: n3\n\n')).toEqual([{ n: 3, ascii: false }]);
    expect(p.push(ascii('data: n4\n\n'))).toEqual([{ n: 4, ascii: false }]);
  });
});

describe('SseParser with a quick path that reads bytes', () => {
  /** Reads `data: b<digit>` events from bytes, noting each Buffer it was handed; one whole `data: e<digit>` event from its text. */
  const reader = () => {
    const handed: Buffer[] = [];
    const quick: QuickEvents<Record<string, string | number>> = {
      read: (text: string, start: number) => (text.startsWith('data: t', start) ? { event: { text: text[start + 7] }, end: start + 10 } : undefined),
      bytes: {
        read(bytes: Buffer, start: number) {
          handed.push(bytes);
          const m = /^data: b(\d)\n\n/.exec(bytes.toString('latin1', start, start + 10));
          return m ? { event: { bytes: Number(m[1]) }, end: start + 10 } : undefined;
        },
        event: (text: string) => (/^data: e(\d)\n\n$/.test(text) ? { event: Number(text[7]) } : undefined),
      },
    };
    return { handed, quick };
  };

  it('reads the bytes it is handed where they lie, and decodes the events they leave one at a time', () => {
    const { handed, quick } = reader();
    const p = new SseParser(quick);
    const read = ascii('data: b1\n\n: c\n\ndata: e2\n\nevent: x\ndata: y\n\ndata: z\r\n\r\ndata: b3\n\ndata: b');
    expect(p.push(read)).toEqual([{ bytes: 1 }, { event: 2 }, { event: 'x', data: 'y' }, { event: undefined, data: 'z' }, { bytes: 3 }]);
    expect(handed.every((b) => b === read)).toBe(true);
    // The rest of one read joined to the next, still as bytes.
    expect(p.push(ascii('4\n\ndata: e'))).toEqual([{ bytes: 4 }]);
    expect(p.push(ascii('5\n\n'))).toEqual([{ event: 5 }]);
  });

  it('reads text, and every read after it, the way text is read, the rest of the bytes before it included', () => {
    const { handed, quick } = reader();
    const p = new SseParser(quick);
    expect(p.push(ascii('data: b1\n\ndata: t'))).toEqual([{ bytes: 1 }]);
    handed.length = 0;
    expect(p.push('2\n\ndata: t3\n\n')).toEqual([{ text: '2' }, { text: '3' }]);
    expect(p.push(ascii('data: b4\n\n'))).toEqual([{ event: undefined, data: 'b4' }]);
    expect(handed).toEqual([]);
  });

  it('ends with what is left of the bytes as a last event', () => {
    const p = new SseParser(reader().quick);
    expect(p.push(ascii('data: [DONE]'))).toEqual([]);
    expect(p.end()).toEqual([{ event: undefined, data: '[DONE]' }]);
  });
});
