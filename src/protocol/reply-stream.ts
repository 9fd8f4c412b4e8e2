// What a client API's renderer of a streamed reply is: the text of its
// server-sent events for each stage of the one event sequence every
// generation produces (normalized by the upstream's dialect). The stream
// relay (gateway/stream-relay.ts) writes what it returns, in order.
import type { ChoiceDelta, ContentRun, Usage } from './chat-response.js';
import type { ApiError } from './errors.js';

export interface ReplyRenderer {
  /** What opens the stream, before any content ('' where the API opens nothing). */
  start(): string;
  /** A run of plain content: the text that opens its block or choice ('' once open), and its pieces, kept apart because the run is long and joining would copy it. */
  content(run: ContentRun): [opening: string, pieces: string];
  /** A batch of deltas ('' when there is nothing to send). */
  deltas(choices: ChoiceDelta[]): string;
  /** What closes a reply that finished, with its usage. */
  end(usage: Usage): string;
  /** Sent whenever the upstream has been silent for the keep-alive interval. */
  readonly keepAlive: string;
  /** The event that ends a stream which cannot finish: the upstream broke off (no `err`), or failed after keep-alives had begun. */
  failure(err?: ApiError): string;
}
