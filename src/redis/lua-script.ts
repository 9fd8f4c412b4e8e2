// A Lua script run by its SHA (EVALSHA), loaded on first use and again after
// a Redis restart empties the script cache. Each change of money is one of
// these: atomic, so concurrent replicas never interleave inside it.
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';

export type ScriptReply = (string | number | null)[];

export interface LuaScript {
  run(redis: Redis, keys: string[], args: (string | number)[]): Promise<ScriptReply>;
}

/**
 * Writes a Lua number as Redis integer text. Lua's own formatting can make
 * "-0" or "1e+15", which HINCRBY refuses mid-script; and a script that fails
 * half-way keeps the writes it made, so every numeric write goes through this.
 */
export const LUA_INT = `local function int(x) return string.format('%d', x) end`;

/** Reads the Redis server clock in milliseconds, the one clock every replica shares. */
export const LUA_NOW_MS = `local __t = redis.call('TIME'); local now_ms = tonumber(__t[1]) * 1000 + math.floor(tonumber(__t[2]) / 1000)`;

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
  return JSON.stringify(value).replace(LONE_SURROGATE_ESCAPE, '$1\\ufffd');
}

export function luaScript(source: string): LuaScript {
  const sha = createHash('sha1').update(source).digest('hex');
  return {
    async run(redis, keys, args) {
      try {
        return (await redis.evalsha(sha, keys.length, ...keys, ...args)) as ScriptReply;
      } catch (err) {
        if (!String((err as Error).message).startsWith('NOSCRIPT')) throw err;
        return (await redis.eval(source, keys.length, ...keys, ...args)) as ScriptReply;
      }
    },
  };
}
