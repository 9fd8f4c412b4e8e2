import { describe, expect, it } from 'vitest';
import { randomId } from '../../src/gateway/random-ids.js';

describe('randomId', () => {
  it('makes 22 URL-safe characters carrying 128 bits, none repeated', () => {
    const ids = Array.from({ length: 2_000 }, randomId);
    for (const id of ids) {
      expect(id).toMatch(/^[A-Za-z0-9_-]{22}$/);
      expect(Buffer.from(id, 'base64url')).toHaveLength(16);
    }
    expect(new Set(ids).size).toBe(ids.length);
  });
});
