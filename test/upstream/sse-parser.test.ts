import { describe, expect, it } from 'vitest';
import { SseParser } from '../../src/upstream/sse-parser.js';

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
      return m ? { event: ascii ? { n: Number(m[1]), ascii } : { n: Number(m[1]) }, end: pattern.lastIndex } : undefined;
    },
  };

  it('reads matching events whole and the rest the ordinary way, in order', () => {
    const p = new SseParser(quick);
    expect(p.push('data: n1\n\n: comment\n\nevent: x\ndata: y\n\ndata: n2\n\n')).toEqual([{ n: 1 }, { event: 'x', data: 'y' }, { n: 2 }]);
  });

  it('waits for the rest of an event split across reads, and does not read a half-parsed event quickly', () => {
    const p = new SseParser(quick);
    expect(p.push('data: n')).toEqual([]);
    expect(p.push('3\n')).toEqual([]);
    expect(p.push('\ndata: n4\n\n')).toEqual([{ event: undefined, data: 'n3' }, { n: 4 }]);
  });

  it('says an event is ASCII only when every read it was made of was known to be', () => {
    const p = new SseParser(quick);
    expect(p.push('data: n1\n\ndata: n', true)).toEqual([{ n: 1, ascii: true }]);
    expect(p.push('2\n\n', true)).toEqual([{ n: 2, ascii: true }]);
    expect(p.push('data: n3\n\ndata: n', false)).toEqual([{ n: 3 }]);
    // An event begun in a read not known to be ASCII, and (the parser keeps no finer account) the rest of that read.
    expect(p.push('4\n\ndata: n5\n\n', true)).toEqual([{ n: 4 }, { n: 5 }]);
    expect(p.push('data: n6\n\n', true)).toEqual([{ n: 6, ascii: true }]);
  });
});
