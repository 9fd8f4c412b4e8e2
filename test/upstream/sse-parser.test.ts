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
    read(text: string, start: number, bytes: Buffer | undefined) {
      pattern.lastIndex = start;
      const m = pattern.exec(text);
      // What the bytes say at the match, where the quick path was given them.
      return m ? { event: bytes ? { n: Number(m[1]), bytes: bytes.toString('latin1', start, pattern.lastIndex) } : { n: Number(m[1]) }, end: pattern.lastIndex } : undefined;
    },
  };
  const ascii = (text: string) => Buffer.from(text, 'latin1');

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

  it('hands the quick path the bytes of the text it reads only when every read the text was made of came with them', () => {
    const p = new SseParser(quick);
    expect(p.push('data: n1\n\ndata: n', ascii('data: n1\n\ndata: n'))).toEqual([{ n: 1, bytes: 'data: n1\n\n' }]);
    // The rest of a read and the next, joined: the bytes stay in step with the text.
    expect(p.push('2\n\ndata: n3\n\n', ascii('2\n\ndata: n3\n\n'))).toEqual([{ n: 2, bytes: 'data: n2\n\n' }, { n: 3, bytes: 'data: n3\n\n' }]);
    expect(p.push('data: n4\n\ndata: n')).toEqual([{ n: 4 }]);
    // An event begun in a read that came without bytes, and (the parser keeps no finer account) the rest of that read.
    expect(p.push('5\n\ndata: n6\n\n', ascii('5\n\ndata: n6\n\n'))).toEqual([{ n: 5 }, { n: 6 }]);
    expect(p.push('data: n7\n\n', ascii('data: n7\n\n'))).toEqual([{ n: 7, bytes: 'data: n7\n\n' }]);
  });
});
