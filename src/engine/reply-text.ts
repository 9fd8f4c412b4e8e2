// A reply's text as its tokens come. Decoding the whole reply again at each
// token costs time that grows with the square of its length (285 ms over a
// 4,096-token reply, on the engine's event loop);
// decoding each token alone loses what depends on the tokens before it: the
// space a SentencePiece word starts with, and a UTF-8 character split over
// byte tokens. So each token decodes a short window, the tokens of the last
// step that added text plus those since, and the text takes what the new ones
// added to it.
import type { Token } from 'node-llama-cpp';

export class ReplyText {
  readonly tokens: Token[] = [];
  /** The reply's text up to its last whole character. */
  text = '';
  private windowStart = 0;
  /** Tokens before this one are in `text`. */
  private decodedUpTo = 0;

  constructor(private readonly detokenize: (tokens: Token[]) => string) {}

  push(token: Token): void {
    this.tokens.push(token);
    const added = this.added();
    // A character still missing bytes waits for the tokens that finish it.
    if (added?.endsWith('\uFFFD')) return;
    this.text = this.textWith(added);
    this.windowStart = this.decodedUpTo;
    this.decodedUpTo = this.tokens.length;
  }

  /** The whole text once the reply is over, with a character left unfinished as U+FFFD. */
  end(): string {
    return this.textWith(this.added());
  }

  /** The whole text with `added` after it, or the whole reply decoded again where the window went wrong. */
  private textWith(added: string | undefined): string {
    return added === undefined ? this.detokenize(this.tokens) : this.text + added;
  }

  /**
   * The text the tokens from `decodedUpTo` on add. Undefined when, with them,
   * the window no longer starts with what it was: a tokenizer that tidies
   * spaces between tokens may do that, and then only the whole reply decoded
   * again is right.
   */
  private added(): string | undefined {
    const window = this.detokenize(this.tokens.slice(this.windowStart));
    const before = this.detokenize(this.tokens.slice(this.windowStart, this.decodedUpTo));
    return window.startsWith(before) ? window.slice(before.length) : undefined;
  }
}
