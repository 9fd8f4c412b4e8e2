// The bytes of request bodies each account has in flight on this replica:
// read, or being read, by requests not yet answered. A body is held whole
// while its request runs, so without a bound one tenant's many large or
// slowly sent bodies (each up to `maxBodyBytes`, a batch file's 32 MiB)
// could take the replica's memory from every other tenant; past
// `gateway.bodyBytesPerAccount` a request is refused as its bytes arrive,
// and the others' are served. What a request reads of the account's stored
// data is counted alike: the file a batch create reads, the part a download
// holds (gateway/batch-routes.ts).
import type { ServerResponse } from 'node:http';
import { bodiesInFlight } from '../protocol/errors.js';
import type { BodyAllowance } from '../protocol/http-io.js';

export class BodyBudget {
  private readonly held = new Map<string, number>();

  constructor(private readonly limitBytes: () => number) {}

  /** A request's share of its account's bytes: refused past the limit; all it took is given back when its reply closes. */
  allowance(account: string, res: ServerResponse): BodyAllowance {
    let taken = 0;
    res.once('close', () => {
      const left = (this.held.get(account) ?? 0) - taken;
      if (left > 0) this.held.set(account, left);
      else this.held.delete(account);
    });
    return {
      take: (bytes) => {
        const limit = this.limitBytes();
        const after = (this.held.get(account) ?? 0) + bytes;
        if (after > limit) return bodiesInFlight(limit);
        this.held.set(account, after);
        taken += bytes;
        return null;
      },
    };
  }
}
