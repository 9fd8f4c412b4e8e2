// One reply on one context sequence: reuse the sequence's cached prefix,
// sample with the request's settings, stop on end-of-generation, a stop
// string or the token cap, and hand out text as soon as it is safe to.
import { TokenBias, type LlamaContextSequence, type LlamaModel, type Token } from 'node-llama-cpp';
import type { TokenLogprob } from '../protocol/chat-response.js';
import { ReplyText } from './reply-text.js';

export interface Sampling {
  temperature: number;
  topP: number;
  seed: number;
  presencePenalty: number;
  frequencyPenalty: number;
  logitBias: Record<string, number>;
  stop: string[];
  maxTokens: number;
  /** null: no logprobs; otherwise how many alternatives per token. */
  topLogprobs: number | null;
}

export interface Piece {
  content: string;
  logprobs: TokenLogprob[] | null;
}

export interface ChoiceResult {
  finishReason: 'stop' | 'length';
  completionTokens: number;
  cachedTokens: number;
}

function tokenBias(model: LlamaModel, logitBias: Record<string, number>): TokenBias | undefined {
  const entries = Object.entries(logitBias);
  if (entries.length === 0) return undefined;
  const bias = new TokenBias(model.tokenizer);
  // TokenBias.set() passes over end-of-generation tokens, so that a reply can always end; OpenAI's
  // logit_bias applies to every token (a reply that may not end runs to max_tokens), so those go into
  // the map that set() fills, which is what the sampler reads. There is no public way round set(): a
  // TokenBias built on a tokenizer that calls no token end-of-generation is refused by the context,
  // which requires the model's own tokenizer (node-llama-cpp 3.22).
  const logits = (bias as unknown as { _biases: Map<Token, number> })._biases;
  for (const [id, value] of entries) {
    const token = Number(id) as Token;
    if (model.isEogToken(token)) logits.set(token, value <= -100 ? -Infinity : value);
    else bias.set(token, value <= -100 ? 'never' : { logit: value });
  }
  return bias;
}

/** Length of the longest tail of `text` that could still grow into a stop string. */
function pendingStopLength(text: string, stops: string[]): number {
  let hold = 0;
  for (const s of stops) {
    for (let n = Math.min(s.length - 1, text.length); n > hold; n--) {
      if (text.endsWith(s.slice(0, n))) {
        hold = n;
        break;
      }
    }
  }
  return hold;
}

/** Where the first stop string starts in `text`, looking only at what could hold a new one since `sent`; -1 for none. */
function firstStop(text: string, stops: string[], sent: number): number {
  return stops.reduce((first, s) => {
    const i = text.indexOf(s, Math.max(0, sent - s.length));
    return i !== -1 && (first === -1 || i < first) ? i : first;
  }, -1);
}

/** The sampled token's logprob and its `topN` likeliest alternatives, in OpenAI's shape. */
function tokenLogprob(model: LlamaModel, token: Token, probabilities: Map<Token, number>, topN: number): TokenLogprob {
  const entry = (t: Token) => {
    const s = model.detokenize([t]);
    return { token: s, logprob: Math.log(probabilities.get(t) ?? Number.MIN_VALUE), bytes: [...Buffer.from(s, 'utf8')] };
  };
  return { ...entry(token), top_logprobs: [...probabilities.keys()].slice(0, topN).map(entry) };
}

/** Drops what the sequence holds past the prompt's shared prefix; returns how many prompt tokens it keeps. */
async function reusePrefix(seq: LlamaContextSequence, prompt: Token[]): Promise<number> {
  // The last prompt token is always evaluated again: its logits pick the first reply token.
  const reuse = Math.min(seq.compareContextTokens(prompt).firstDifferentIndex, prompt.length - 1);
  if (seq.nextTokenIndex > reuse) await seq.eraseContextTokenRanges([{ start: reuse, end: seq.nextTokenIndex }]);
  return reuse;
}

function sampledTokens(model: LlamaModel, seq: LlamaContextSequence, tokens: Token[], sampling: Sampling, reply: ReplyText) {
  const penalize = sampling.presencePenalty !== 0 || sampling.frequencyPenalty !== 0;
  return seq.evaluateWithMetadata(
    tokens,
    { probabilities: sampling.topLogprobs !== null },
    {
      temperature: sampling.temperature,
      topP: sampling.topP,
      seed: sampling.seed,
      tokenBias: tokenBias(model, sampling.logitBias),
      repeatPenalty: penalize
        ? { punishTokens: () => reply.tokens, penalty: 1, presencePenalty: sampling.presencePenalty, frequencyPenalty: sampling.frequencyPenalty, maxPunishTokens: 256 }
        : undefined,
    },
  );
}

/** Hands out a reply's text as it becomes safe to, each piece with the logprobs of the tokens gathered since the last. */
class PieceEmitter {
  private sent = 0;
  private logprobs: TokenLogprob[] = [];

  constructor(
    private readonly emit: (piece: Piece) => void,
    private readonly withLogprobs: boolean,
  ) {}

  get sentLength(): number {
    return this.sent;
  }

  gather(logprob: TokenLogprob): void {
    this.logprobs.push(logprob);
  }

  /** Hands out `text` up to `upTo` past what went before. */
  flush(text: string, upTo: number): void {
    if (upTo <= this.sent && this.logprobs.length === 0) return;
    this.emit({ content: text.slice(this.sent, upTo), logprobs: this.withLogprobs ? this.logprobs : null });
    this.sent = Math.max(this.sent, upTo);
    this.logprobs = [];
  }
}

export async function generateChoice(
  model: LlamaModel,
  seq: LlamaContextSequence,
  prompt: Token[],
  sampling: Sampling,
  emit: (piece: Piece) => void,
  signal: AbortSignal,
): Promise<ChoiceResult> {
  const reuse = await reusePrefix(seq, prompt);
  const reply = new ReplyText((tokens) => model.detokenize(tokens));
  const pieces = new PieceEmitter(emit, sampling.topLogprobs !== null);
  let finishReason: ChoiceResult['finishReason'] = 'stop';
  let stopAt: number | undefined;
  for await (const out of sampledTokens(model, seq, prompt.slice(reuse), sampling, reply)) {
    if (signal.aborted) break;
    reply.push(out.token);
    const text = reply.text;
    if (sampling.topLogprobs !== null) {
      pieces.gather(tokenLogprob(model, out.token, (out as unknown as { probabilities: Map<Token, number> }).probabilities, sampling.topLogprobs));
    }
    const hit = firstStop(text, sampling.stop, pieces.sentLength);
    if (hit !== -1) {
      stopAt = hit;
      break;
    }
    if (reply.tokens.length >= sampling.maxTokens) {
      finishReason = 'length';
      break;
    }
    // Hold back a possible stop-string start (reply.text already holds back an unfinished character).
    const safe = text.length - pendingStopLength(text, sampling.stop);
    if (safe > pieces.sentLength) pieces.flush(text, safe);
  }
  const text = stopAt === undefined ? reply.end() : reply.text.slice(0, stopAt);
  pieces.flush(text, text.length);
  return { finishReason, completionTokens: reply.tokens.length, cachedTokens: reuse };
}
