// The client address behind trusted proxies: X-Forwarded-For read from the
// right, through the trusted hops only.
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { clientAddress, isProxyEntry } from '../../src/platform/client-address.js';
import { parseRoutingFile } from '../../src/config.js';

const request = (peer: string, forwarded?: string) => ({ socket: { remoteAddress: peer }, headers: forwarded === undefined ? {} : { 'x-forwarded-for': forwarded } }) as unknown as IncomingMessage;

describe('clientAddress', () => {
  it('is the peer when no proxy is trusted, or when the peer is not one', () => {
    expect(clientAddress(request('203.0.113.5', '198.51.100.1'), [])).toBe('203.0.113.5');
    expect(clientAddress(request('203.0.113.5', '198.51.100.1'), ['10.0.0.0/8'])).toBe('203.0.113.5');
  });

  it('walks back through trusted hops only, and stops at the first untrusted one', () => {
    const proxies = ['10.0.0.0/8', '192.168.1.1'];
    expect(clientAddress(request('10.1.2.3', '1.1.1.1, 203.0.113.5'), proxies)).toBe('203.0.113.5');
    expect(clientAddress(request('::ffff:10.1.2.3', '203.0.113.5, 192.168.1.1'), proxies)).toBe('203.0.113.5');
    // Every hop trusted: the leftmost, which the first proxy wrote.
    expect(clientAddress(request('10.1.2.3', '10.0.0.9'), proxies)).toBe('10.0.0.9');
    // Not an address where a proxy would have written one: the proxy is the client.
    expect(clientAddress(request('10.1.2.3', 'unknown'), proxies)).toBe('10.1.2.3');
    expect(clientAddress(request('10.1.2.3'), proxies)).toBe('10.1.2.3');
  });

  it('takes IPv6 proxies and clients', () => {
    expect(clientAddress(request('fd00::1', '2001:db8::7'), ['fd00::/8'])).toBe('2001:db8::7');
  });
});

describe('platform.trustedProxies', () => {
  it('holds addresses and CIDR ranges, and the routing file refuses anything else', () => {
    for (const good of ['10.0.0.1', '10.0.0.0/8', 'fd00::/8', '::1']) expect(isProxyEntry(good), good).toBe(true);
    for (const bad of ['10.0.0.0/33', 'proxy.internal', '10.0.0.0/8/1', '10.0.0.0/x', '']) expect(isProxyEntry(bad), bad).toBe(false);
    const file = (proxies: string[]) => `platform: { trustedProxies: ${JSON.stringify(proxies)} }\nmodels: [{ id: m, contextWindow: 4096, pricesPerMillion: { inputCacheMiss: 1, inputCacheHit: 0.1, output: 2 }, endpoints: [{ kind: vllm, url: "http://127.0.0.1:9/v1" }] }]\n`;
    expect(parseRoutingFile(file(['10.0.0.0/8']), 'r.yaml', '/').platform.trustedProxies).toEqual(['10.0.0.0/8']);
    expect(() => parseRoutingFile(file(['lb.internal']), 'r.yaml', '/')).toThrow(/trustedProxies/);
  });
});
