import { describe, expect, it } from 'vitest';
import { MAX_EVENT_CHARS, SseParser } from '../../src/upstream/sse-parser.js';

describe('SseParser', () => {
  it('refuses a line that never ends, and an event of many lines that never ends, past MAX_EVENT_CHARS', () => {
    const line = new SseParser();
    const piece = 'x'.repeat(1024 * 1024);
    expect(() => {
      for (let i = 0; i <= MAX_EVENT_CHARS / piece.length; i++) line.push(i === 0 ? `data: ${piece}` : piece);
    }).toThrow(/longer than/);
    const lines = new SseParser();
    expect(() => {
      for (let i = 0; i <= MAX_EVENT_CHARS / piece.length; i++) lines.push(`data: ${piece}\n`);
    }).toThrow(/longer than/);
    // An event just under the bound still reads.
    const whole = new SseParser();
    expect(whole.push(`data: ${'y'.repeat(MAX_EVENT_CHARS - 100)}\n\n`)).toHaveLength(1);
  });

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

  it("treats the dialect's own error field as an error event, and ignores it otherwise as any unknown field", () => {
    expect(new SseParser({ errorField: 'error' }).push('error: {"message":"boom"}\n\n')).toEqual([{ event: 'error', data: '{"message":"boom"}' }]);
    expect(new SseParser().push('error: {"message":"boom"}\n\n')).toEqual([]);
  });

  it('delivers a last event that has no blank line after it when the input ends', () => {
    const p = new SseParser();
    expect(p.push('data: [DONE]')).toEqual([]);
    expect(p.end()).toEqual([{ event: undefined, data: '[DONE]' }]);
  });
});
