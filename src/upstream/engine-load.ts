// What an inference engine says of its own load, read from the metrics it
// serves in Prometheus's text format. Each dialect names its engine's gauges
// (upstream/dialects/); this module only reads the text. Values are summed
// over label sets, so that a server running several engines (vLLM's
// `engine="0"`, `engine="1"`) counts them all; the KV-cache use is the
// fullest engine's.

/** One reading of an engine's load. */
export interface EngineLoad {
  /** Requests the engine is computing (holding KV cache). */
  running: number;
  /** Requests queued inside the engine, not started. */
  waiting: number;
  /** The share of its KV cache in use, 0 to 1, where the engine reports it. */
  kvCacheUse?: number;
  /** Its requests finished so far and the seconds they ran (not queued) in all, where the engine reports them. */
  ran?: { requests: number; seconds: number };
}

/** Where an engine kind serves its load, and which of its gauges say what. */
export interface EngineLoadSource {
  /** The metrics URL, from the endpoint's base URL (which ends in /v1). */
  url(baseUrl: string): string;
  running: string;
  waiting: string;
  /** The KV-cache gauge's names, old and new (only one is served): the fullest value of any. */
  kvCacheUse?: string[];
  /** A histogram of the seconds each finished request ran, not counting its queueing: its `_count` and `_sum` are read. */
  runTime?: string;
}

/** The engine's metrics served at its root (vLLM, SGLang, llama.cpp's server): `/metrics` beside `/v1`. */
export const rootMetrics = (baseUrl: string) => `${baseUrl.replace(/\/v1$/, '')}/metrics`;

/** The sum (or, for `max`, the largest) of each named gauge's samples; a name with no sample is absent. */
export function gaugeValues(text: string, names: { sum: string[]; max: string[] }): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.length === 0 || line.startsWith('#')) continue;
    const nameEnd = line.search(/[{\s]/);
    if (nameEnd <= 0) continue;
    const name = line.slice(0, nameEnd);
    const summed = names.sum.includes(name);
    if (!summed && !names.max.includes(name)) continue;
    // The value follows the labels (which may hold spaces inside quotes); a timestamp may follow it.
    const rest = line[nameEnd] === '{' ? line.slice(line.lastIndexOf('}') + 1) : line.slice(nameEnd);
    const value = Number(rest.trim().split(/\s+/)[0]);
    if (!Number.isFinite(value)) continue;
    const before = values.get(name);
    values.set(name, before === undefined ? value : summed ? before + value : Math.max(before, value));
  }
  return values;
}

/** The engine's load from its metrics text; undefined where the text lacks its running or waiting gauge. */
export function readEngineLoad(source: EngineLoadSource, text: string): EngineLoad | undefined {
  const kvNames = source.kvCacheUse ?? [];
  const ranNames = source.runTime === undefined ? [] : [`${source.runTime}_count`, `${source.runTime}_sum`];
  const values = gaugeValues(text, { sum: [source.running, source.waiting, ...ranNames], max: kvNames });
  const running = values.get(source.running);
  const waiting = values.get(source.waiting);
  if (running === undefined || waiting === undefined) return undefined;
  const kvValues = kvNames.map((name) => values.get(name)).filter((v) => v !== undefined);
  const kv = kvValues.length > 0 ? Math.max(...kvValues) : undefined;
  const [requests, seconds] = ranNames.map((name) => values.get(name));
  return {
    running,
    waiting,
    ...(kv === undefined ? {} : { kvCacheUse: Math.min(1, Math.max(0, kv)) }),
    ...(requests === undefined || seconds === undefined ? {} : { ran: { requests, seconds } }),
  };
}
