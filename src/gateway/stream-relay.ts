// Relays an upstream's normalized stream to the client as OpenAI's chunks:
// keep-alive comments while the upstream is silent, the usage chunk when
// asked for, [DONE] on a whole reply and the error event on a broken one.
import type { ServerResponse } from 'node:http';
import { ChunkRenderer, SSE_KEEP_ALIVE, sseData, type ReplyIdentity, type StreamEvent, type Usage } from '../protocol/chat-response.js';
import { STREAM_BROKE_OFF_BODY } from '../protocol/errors.js';
import { SSE_HEADERS } from '../protocol/http-io.js';

export type StreamOutcome =
  | { kind: 'complete'; usage: Usage }
  | { kind: 'broke_off'; reason: string }
  | { kind: 'client_gone' };

export interface RelayOptions {
  identity: ReplyIdentity;
  includeUsage: boolean;
  keepAliveMs: number;
  headers: Record<string, string>;
  /** Prompt tokens counted by the gateway, for an upstream that reports no usage. */
  countedPromptTokens: number;
  clientGone: AbortSignal;
}

export async function relayStream(res: ServerResponse, events: AsyncGenerator<StreamEvent[]>, opts: RelayOptions): Promise<StreamOutcome> {
  const renderer = new ChunkRenderer(opts.identity, opts.includeUsage);
  res.writeHead(200, { ...SSE_HEADERS, ...opts.headers });
  const keepAlive = setTimeout(function beat() {
    res.write(SSE_KEEP_ALIVE);
    keepAlive.refresh();
  }, opts.keepAliveMs);
  let usage: Usage | undefined;
  let contentDeltas = 0;
  try {
    for await (const batch of events) {
      let out = '';
      for (const event of batch) {
        if (event.choices) {
          for (const c of event.choices) if (c.delta.content) contentDeltas++;
          out += renderer.deltas(event.choices);
        }
        if (event.usage) usage = event.usage;
      }
      if (out) res.write(out);
      keepAlive.refresh();
    }
    // Metering needs usage; an upstream that sent none is measured by what it streamed.
    usage ??= { prompt_tokens: opts.countedPromptTokens, completion_tokens: contentDeltas, cached_tokens: 0 };
    res.end(renderer.end(usage));
    return { kind: 'complete', usage };
  } catch (err) {
    if (opts.clientGone.aborted) {
      res.destroy();
      return { kind: 'client_gone' };
    }
    res.end(sseData(JSON.stringify(STREAM_BROKE_OFF_BODY)));
    return { kind: 'broke_off', reason: (err as Error).message };
  } finally {
    clearTimeout(keepAlive);
  }
}
