// A Lua script run by its SHA (EVALSHA), loaded on first use and again after
// a Redis restart empties the script cache. Each change of money is one of
// these: atomic, so concurrent replicas never interleave inside it.
import { createHash } from 'node:crypto';
import type { Redis } from './connection.js';
import { durabilityOf, NotReplicated, replicasKnown } from './replication.js';

export type ScriptReply = (string | number | null)[];

export interface LuaScript {
  run(redis: Redis, keys: string[], args: (string | number)[]): Promise<ScriptReply>;
  /**
   * Runs it, then WAITs on the same connection (on a cluster: the same node)
   * for its writes to reach the replicas the connection asks for; throws
   * NotReplicated, after the script ran, when they did not in time.
   */
  runDurably(redis: Redis, keys: string[], args: (string | number)[]): Promise<ScriptReply>;
}

/**
 * Writes a Lua number as Redis integer text. Lua's own formatting can make
 * "-0" or "1e+15", which HINCRBY refuses mid-script; and a script that fails
 * half-way keeps the writes it made, so every numeric write goes through this.
 */
export const LUA_INT = `local function int(x) return string.format('%d', x) end`;

/** Reads the Redis server clock in milliseconds, the one clock every replica shares. */
export const LUA_NOW_MS = `local __t = redis.call('TIME'); local now_ms = tonumber(__t[1]) * 1000 + math.floor(tonumber(__t[2]) / 1000)`;

/**
 * Names for the positional arguments of a batch item, one list both sides
 * read: `lua('S')` declares them as indices in Lua (the script reads
 * `A[S.cost]`), and `list` puts TypeScript's named values in that order.
 */
export function luaArgs<Name extends string>(names: readonly Name[]) {
  return {
    lua: (table: string) => `local ${table} = { ${names.map((n, i) => `${n} = ${i + 1}`).join(', ')} }`,
    list: (values: Record<Name, string | number>) => names.map((n) => values[n]),
  };
}

/** The statuses a script answers with, declared as Lua locals from the object TypeScript compares them by. */
export const luaConstants = (constants: Record<string, number>): string =>
  Object.entries(constants)
    .map(([name, value]) => `local ${name} = ${value}`)
    .join('\n');

// An escape starts at a backslash that is not itself escaped: one after an even run of backslashes.
const LONE_SURROGATE_ESCAPE = /(?<!\\)((?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/gi;

/**
 * `value` as JSON text that a script can read with Redis's cjson. JSON writes
 * a lone surrogate (text from outside: an upstream's error message) as an
 * escape that cjson refuses, failing the whole script, at every retry; each
 * becomes U+FFFD, as UTF-8 encoding makes of it. Pairs are written as they
 * are, not escaped, so every `\ud800`-`\udfff` escape is a lone one.
 */
export function luaJson(value: unknown): string {
  const text = JSON.stringify(value);
  // JSON writes such escapes in lower case; a text with none (nearly every one) is not scanned again (with the rest
  // of 0327bf4, `node bench/revision-ab.mjs 0327bf4~ whole 32 6 8` gave 1.07, 2026-11-29).
  return text.includes('\\ud') ? text.replace(LONE_SURROGATE_ESCAPE, '$1\\ufffd') : text;
}

const isNoScript = (err: unknown) => String((err as Error | null)?.message).startsWith('NOSCRIPT');

export function luaScript(source: string): LuaScript {
  const sha = createHash('sha1').update(source).digest('hex');
  const script: LuaScript = {
    async run(redis, keys, args) {
      try {
        return (await redis.evalsha(sha, keys.length, ...keys, ...args)) as ScriptReply;
      } catch (err) {
        if (!isNoScript(err)) throw err;
        return (await redis.eval(source, keys.length, ...keys, ...args)) as ScriptReply;
      }
    },
    async runDurably(redis, keys, args) {
      const durability = durabilityOf(redis);
      if (durability.replicas === 0) return script.run(redis, keys, args);
      const wanted = Math.min(durability.replicas, await replicasKnown(redis, keys[0]));
      if (wanted === 0) return script.run(redis, keys, args);
      // One pipeline, so that WAIT follows the script on its connection (WAIT counts that
      // connection's writes; on a cluster, keyless commands go where the keyed ones do).
      const attempt = (first: 'evalsha' | 'eval') =>
        redis
          .pipeline()
          [first](first === 'evalsha' ? sha : source, keys.length, ...keys, ...args)
          .wait(wanted, durability.timeoutMs)
          .exec();
      let results = (await attempt('evalsha'))!;
      if (isNoScript(results[0][0])) results = (await attempt('eval'))!;
      const [[scriptErr, reply], [waitErr, acked]] = results;
      if (scriptErr) throw scriptErr;
      if (waitErr) throw waitErr;
      // Fewer than asked: either a replica lags (the write may yet be lost), or one has gone (nothing to lose it to).
      if ((acked as number) < wanted && (acked as number) < (await replicasKnown(redis, keys[0], true))) {
        throw new NotReplicated(`${acked} of ${wanted} replicas took the write within ${durability.timeoutMs} ms`);
      }
      return reply as ScriptReply;
    },
  };
  return script;
}
