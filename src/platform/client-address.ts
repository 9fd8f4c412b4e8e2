// The address a platform request came from, for the windows that count
// log-ins and sign-ups per client. Behind a proxy or load balancer every
// request comes from the proxy's address, so all clients would share one
// window; the proxies an operator names (`platform.trustedProxies`) are
// looked through, by the X-Forwarded-For entries each appends, from the
// right: the first address that is not a trusted proxy is the client. An
// entry a client wrote itself is reached only past a hop that is not
// trusted, so it is never taken on its word.
import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';

/** An IPv4 address as Node reports it on a dual-stack socket (::ffff:10.0.0.1), as IPv4. */
const plain = (address: string) => (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address);

/** The address's family as BlockList names it; null for text that is not an address. */
const familyOf = (address: string) => ({ 4: 'ipv4', 6: 'ipv6' } as const)[isIP(address) as 4 | 6] ?? null;

const lists = new WeakMap<readonly string[], BlockList>();

/** The proxies as a BlockList (addresses and CIDR ranges), made once per routing file. */
function trustedList(proxies: readonly string[]): BlockList {
  let list = lists.get(proxies);
  if (!list) {
    list = new BlockList();
    for (const entry of proxies) {
      const [address, prefix] = entry.split('/');
      const family = familyOf(address)!;
      if (prefix === undefined) list.addAddress(address, family);
      else list.addSubnet(address, Number(prefix), family);
    }
    lists.set(proxies, list);
  }
  return list;
}

/** Whether `entry` is an address or a CIDR range that trustedProxies can hold. */
export function isProxyEntry(entry: string): boolean {
  const [address, prefix, extra] = entry.split('/');
  const family = familyOf(address);
  if (!family || extra !== undefined) return false;
  return prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 'ipv4' ? 32 : 128));
}

export function clientAddress(req: IncomingMessage, trustedProxies: readonly string[]): string {
  let address = plain(req.socket.remoteAddress ?? 'unknown');
  if (trustedProxies.length === 0) return address;
  const trusted = trustedList(trustedProxies);
  const isTrusted = (a: string) => {
    const family = familyOf(a);
    return family !== null && trusted.check(a, family);
  };
  const forwarded = String(req.headers['x-forwarded-for'] ?? '').split(',');
  while (isTrusted(address) && forwarded.length > 0) {
    const next = plain(forwarded.pop()!.trim());
    // A trusted proxy writes addresses: anything else stops the walk at that proxy.
    if (!familyOf(next)) break;
    address = next;
  }
  return address;
}
