// Relays an upstream's normalized stream to the client through its API's
// renderer: keep-alives whenever the upstream has been silent for the
// interval (also before it answered at all), the reply's events, its close
// with the usage, and the error event on a broken one.
import type { ServerResponse } from 'node:http';
import type { StreamEvent, Usage, ReplyRenderer } from '../protocol/chat-response.js';
import type { ApiError } from '../protocol/errors.js';
import { drainedOrClosed, SSE_HEADERS } from '../protocol/http-io.js';

export type StreamOutcome =
  | { kind: 'complete'; usage: Usage; finishReasons: string[] }
  | { kind: 'broke_off'; reason: string }
  | { kind: 'client_gone' };

export interface RelayOptions {
  /** The API's chunks: chat's, or text completions'. */
  renderer: ReplyRenderer;
  keepAliveMs: number;
  /** The longest the client may take none of the reply while some waits for it: then it is cut off, as gone. */
  sendTimeoutMs: number;
  headers: Record<string, string>;
  /** Prompt tokens counted by the gateway, for an upstream that reports no usage. */
  countedPromptTokens: number;
  /** Whether the client has gone away. */
  clientGone: () => boolean;
  /** Called once, when the first content reaches the client. */
  onFirstChunk?: () => void;
}

export class StreamRelay {
  private readonly keepAlive: NodeJS.Timeout;

  /** Starts the keep-alive clock; the response stays uncommitted until something is written. */
  constructor(private readonly res: ServerResponse, private readonly opts: RelayOptions) {
    const relay = this;
    this.keepAlive = setTimeout(function beat() {
      relay.write(opts.renderer.keepAlive);
      relay.keepAlive.refresh();
    }, opts.keepAliveMs);
  }

  /**
   * The upstream failed before its stream began. If keep-alives already
   * committed the response, the failure goes out as an error event and true
   * is returned; otherwise the caller answers with a plain error status.
   */
  failBeforeStart(err: ApiError): boolean {
    clearTimeout(this.keepAlive);
    if (!this.res.headersSent) return false;
    this.res.end(this.opts.renderer.failure(err));
    return true;
  }

  async run(events: AsyncGenerator<StreamEvent[]>): Promise<StreamOutcome> {
    const { renderer } = this.opts;
    let usage: Usage | undefined;
    let contentDeltas = 0;
    let firstSent = false;
    /** Why each choice finished, by index: for the request's span. */
    const finishReasons: string[] = [];
    let finished: Usage | undefined;
    /** Ends the reply: the usage chunk when asked for, then [DONE]. */
    const finish = () => {
      // Metering needs usage; an upstream that sent none is measured by what it streamed.
      finished = usage ?? { prompt_tokens: this.opts.countedPromptTokens, completion_tokens: contentDeltas, cached_tokens: 0 };
      clearTimeout(this.keepAlive);
      const closing = renderer.end(finished);
      this.res.end(closing);
    };
    try {
      this.write(renderer.start());
      for await (const batch of events) {
        let done = false;
        // Each part goes out as it is rendered, never joined to the others: Node sends the writes of one
        // turn in one call to the socket, and a joined string would be copied whole once more to be written.
        for (const event of batch) {
          if (event.content) {
            contentDeltas += event.content.pieces;
            const [opening, pieces] = renderer.content!(event.content);
            this.write(opening);
            this.write(pieces);
          }
          if (event.choices) {
            for (const c of event.choices) {
              if (c.delta.content || c.delta.reasoning_content) contentDeltas++;
              if (c.finish_reason) finishReasons[c.index] = c.finish_reason;
            }
            this.write(renderer.deltas(event.choices));
          }
          if (event.usage) usage = event.usage;
          done ||= event.done === true;
        }
        if (contentDeltas > 0 && !firstSent) {
          firstSent = true;
          this.opts.onFirstChunk?.();
        }
        if (done) {
          // The stream's reader ends on its own after [DONE], leaving the upstream connection for the next request.
          finish();
          continue;
        }
        // A client reading slower than the upstream writes holds the upstream back, not Parley's memory.
        if (this.res.writableNeedDrain) await drainedOrClosed(this.res, this.opts.sendTimeoutMs);
        if (this.res.destroyed) return { kind: 'client_gone' };
        this.keepAlive.refresh();
      }
      if (!finished) finish();
      return { kind: 'complete', usage: finished!, finishReasons };
    } catch (err) {
      if (finished) return { kind: 'complete', usage: finished, finishReasons };
      if (this.opts.clientGone()) {
        this.res.destroy();
        return { kind: 'client_gone' };
      }
      this.res.end(renderer.failure());
      return { kind: 'broke_off', reason: (err as Error).message };
    } finally {
      clearTimeout(this.keepAlive);
    }
  }

  /** Commits the response if it is not yet, and writes `text`. */
  private write(text: string): void {
    // Object.assign, not a spread: see sendJson in protocol/http-io.ts.
    if (!this.res.headersSent) this.res.writeHead(200, Object.assign({}, SSE_HEADERS, this.opts.headers));
    if (text) this.res.write(text);
  }
}
