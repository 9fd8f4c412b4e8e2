// `parley engine`: a GGUF served by llama.cpp (through node-llama-cpp) behind
// the OpenAI Chat Completions API, with `n` as parallel sequences and a real
// prefix cache, and the Embeddings API (the model's mean-pooled hidden state,
// normalized). It is the quickstart's upstream and the tests' real one.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LlamaContext, LlamaContextSequence, LlamaEmbeddingContext, LlamaModel, Token } from 'node-llama-cpp';
import { parseChatCompletionRequest, requestedMaxTokens, type ChatCompletionRequest } from '../protocol/chat-request.js';
import { base64Vector, embeddingInputs, parseEmbeddingsRequest, renderEmbeddings, type EmbeddingsRequest } from '../protocol/embeddings.js';
import { ChunkRenderer, renderCompletion, type Choice, type ChoiceDelta, type Completion, type ReplyIdentity, type TokenLogprob, type Usage } from '../protocol/chat-response.js';
import { parseCompletionRequest, promptsOf, renderTextCompletion, TextChunkRenderer, type CompletionRequest } from '../protocol/completions.js';
import { ApiError, Cancelled, checkContextWindow, internalError, invalidParameter, routeNotFound } from '../protocol/errors.js';
import { listen } from '../listen.js';
import { readJsonBody, sendError, sendJson, SSE_HEADERS } from '../protocol/http-io.js';
import { ChatPrompt } from './chat-prompt.js';
import { generateChoice, type ChoiceResult, type Piece, type Sampling } from './generate.js';
import { defaultThreads, localLlama } from './llama.js';
import { SequencePool } from './sequence-pool.js';

export interface EngineOptions {
  modelPath: string;
  /** The id this engine answers to in replies and /v1/models. */
  modelId: string;
  contextSize: number;
  /** Sequences evaluated side by side: concurrent replies, `n` included. */
  parallel: number;
  /** CPU threads for evaluation (defaultThreads when not given); several engines on one machine should split its cores. */
  threads?: number;
  host: string;
  port: number;
}

/** What both generating APIs come to for the engine: the prompt's tokens and the sampling fields. */
type Generation = Pick<ChatCompletionRequest, 'n' | 'seed' | 'stop' | 'temperature' | 'top_p' | 'presence_penalty' | 'frequency_penalty' | 'logit_bias' | 'stream' | 'stream_options'> & {
  tokens: Token[];
  maxTokens: number;
  logprobs: boolean;
  topLogprobs: number | null;
  /** Text the reply starts with: the prompt, when a completion asked for `echo`. */
  echo: string;
  /** Its `cache_salt`: only sequences last filled under the same salt are read from ('' for none). */
  cacheSalt: string;
};

/** The request's `cache_salt`, as vLLM takes it: a string, or none. */
function cacheSaltOf(body: unknown): string | ApiError {
  const salt = (body as { cache_salt?: unknown } | null)?.cache_salt;
  if (salt == null) return '';
  return typeof salt === 'string' && salt !== '' ? salt : invalidParameter('cache_salt', "Invalid value for 'cache_salt': expected a non-empty string.");
}

export interface RunningEngine {
  url: string;
  contextSize: number;
  threads: number;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** An API's replies, for `generate`: its reply ids and renderers. */
interface ReplyFormat {
  idPrefix: string;
  renderWhole(identity: ReplyIdentity, completion: Completion): unknown;
  Renderer: new (identity: ReplyIdentity, includeUsage: boolean) => { deltas(choices: ChoiceDelta[]): string; end(usage: Usage): string };
}

const CHAT_REPLIES: ReplyFormat = { idPrefix: 'chatcmpl-', renderWhole: renderCompletion, Renderer: ChunkRenderer };
const TEXT_REPLIES: ReplyFormat = { idPrefix: 'cmpl-', renderWhole: renderTextCompletion, Renderer: TextChunkRenderer };

/** One generation's `n` choices, as each sequence makes them. */
interface Choices {
  tokens: Token[];
  seqs: LlamaContextSequence[];
  sampling: (i: number) => Sampling;
  abort: AbortSignal;
}

function samplingOf(request: Generation): (i: number) => Sampling {
  const baseSeed = request.seed ?? Math.floor(Math.random() * 2 ** 31);
  const stop = request.stop == null ? [] : typeof request.stop === 'string' ? [request.stop] : request.stop;
  return (i) => ({
    temperature: request.temperature ?? 1,
    topP: request.top_p ?? 1,
    seed: baseSeed + i,
    presencePenalty: request.presence_penalty ?? 0,
    frequencyPenalty: request.frequency_penalty ?? 0,
    logitBias: request.logit_bias ?? {},
    stop: stop.filter((s) => s !== ''),
    maxTokens: request.maxTokens,
    topLogprobs: request.logprobs ? request.topLogprobs : null,
  });
}

const usageOf = (tokens: Token[], results: ChoiceResult[]): Usage => ({
  prompt_tokens: tokens.length,
  completion_tokens: results.reduce((sum, r) => sum + r.completionTokens, 0),
  cached_tokens: Math.min(...results.map((r) => r.cachedTokens)),
});

class LocalEngine {
  private readonly pool: SequencePool;
  private readonly prompt: ChatPrompt;
  private readonly vocabSize: number;
  readonly contextSize: number;
  // Made on the first embeddings request: a chat-only engine never pays for a second context.
  private embedder: Promise<LlamaEmbeddingContext> | undefined;

  constructor(
    private readonly opts: EngineOptions,
    private readonly model: LlamaModel,
    readonly context: LlamaContext,
    private readonly threads: number,
  ) {
    this.pool = new SequencePool(context);
    this.prompt = new ChatPrompt(model);
    this.vocabSize = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    this.contextSize = context.contextSize;
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    const route = `${req.method} ${path}`;
    if (route === 'GET /health') return sendJson(res, 200, { status: 'ok' });
    if (route === 'GET /metrics') return this.metrics(res);
    if (route === 'GET /v1/models') {
      return sendJson(res, 200, { object: 'list', data: [{ id: this.opts.modelId, object: 'model', created: 0, owned_by: 'parley-engine', context_window: this.contextSize }] });
    }
    if (route === 'POST /v1/chat/completions') {
      const body = await readJsonBody(req, MAX_BODY_BYTES);
      return this.chat(parsedOrThrow(parseChatCompletionRequest(body)), parsedOrThrow(cacheSaltOf(body)), res);
    }
    if (route === 'POST /v1/completions') {
      const body = await readJsonBody(req, MAX_BODY_BYTES);
      return this.complete(parsedOrThrow(parseCompletionRequest(body)), parsedOrThrow(cacheSaltOf(body)), res);
    }
    if (route === 'POST /v1/embeddings') return this.embed(parsedOrThrow(parseEmbeddingsRequest(await readJsonBody(req, MAX_BODY_BYTES))), res);
    throw routeNotFound(req.method ?? 'GET', path);
  }

  /** Its load in llama-server's gauges, so that the gateway reads both alike (upstream/dialects/llamacpp.ts). */
  private metrics(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(
      '# HELP llamacpp:requests_processing Number of requests processing.\n# TYPE llamacpp:requests_processing gauge\n' +
        `llamacpp:requests_processing ${this.pool.processing}\n` +
        '# HELP llamacpp:requests_deferred Number of requests deferred.\n# TYPE llamacpp:requests_deferred gauge\n' +
        `llamacpp:requests_deferred ${this.pool.waiting}\n`,
    );
  }

  private chat(request: ChatCompletionRequest, cacheSalt: string, res: ServerResponse): Promise<void> {
    const tokens = this.prompt.tokens(request.messages);
    const maxTokens = requestedMaxTokens(request) ?? this.contextSize - tokens.length;
    return this.generate({ ...request, tokens, maxTokens, logprobs: request.logprobs === true, topLogprobs: request.top_logprobs ?? 0, echo: '', cacheSalt }, res, CHAT_REPLIES);
  }

  private complete(request: CompletionRequest, cacheSalt: string, res: ServerResponse): Promise<void> {
    const prompts = promptsOf(request);
    // The gateway sends a batch's prompts as one call each; this engine serves one at a time.
    if (prompts.length > 1) throw invalidParameter('prompt', 'This engine takes one prompt per request.');
    const text = prompts[0];
    // Raw text, as llama.cpp's server reads a completion's prompt: no chat template, the model's BOS first.
    const bos = this.model.tokens.bos !== null ? [this.model.tokens.bos] : [];
    const tokens = typeof text === 'string' ? [...bos, ...this.model.tokenize(text)] : (text as Token[]);
    const echo = request.echo && typeof text === 'string' ? text : '';
    return this.generate({ ...request, tokens, maxTokens: request.max_tokens ?? 16, logprobs: false, topLogprobs: null, echo, cacheSalt }, res, TEXT_REPLIES);
  }

  /** Generates `n` replies to the request's tokens, whole or streamed, in the format of the API that asked. */
  private async generate(request: Generation, res: ServerResponse, format: ReplyFormat): Promise<void> {
    for (const id of Object.keys(request.logit_bias ?? {})) {
      if (Number(id) >= this.vocabSize) throw invalidParameter('logit_bias', `Invalid key in 'logit_bias': ${id} is not a token id of this model (vocabulary size ${this.vocabSize}).`);
    }
    // A token id past the vocabulary fails the whole decode batch it joins, other tenants' sequences with it: it is
    // refused before its sequence joins one.
    const outside = request.tokens.find((t) => !Number.isInteger(t) || t < 0 || t >= this.vocabSize);
    if (outside !== undefined) throw invalidParameter('prompt', `Invalid value for 'prompt': ${outside} is not a token id of this model (vocabulary size ${this.vocabSize}).`);
    checkContextWindow(this.contextSize, request.tokens.length, Math.max(request.maxTokens, 1));
    const abort = new AbortController();
    // 'close' also follows a finished reply, when the abort no longer matters.
    res.once('close', () => abort.abort());
    const seqs = await this.pool.acquire(request.tokens, request.n ?? 1, request.cacheSalt);
    try {
      const choices: Choices = { tokens: request.tokens, seqs, sampling: samplingOf(request), abort: abort.signal };
      const identity: ReplyIdentity = { id: `${format.idPrefix}${randomUUID()}`, created: Math.floor(Date.now() / 1000), model: this.opts.modelId, serviceTier: 'default' };
      await (request.stream ? this.streamReplies(choices, request, res, new format.Renderer(identity, request.stream_options?.include_usage === true)) : this.wholeReplies(choices, request, res, (c) => format.renderWhole(identity, c)));
    } finally {
      this.pool.release(seqs);
    }
  }

  private run(c: Choices, onPiece: (i: number, p: Piece) => void): Promise<ChoiceResult[]> {
    return Promise.all(c.seqs.map((seq, i) => generateChoice(this.model, seq, c.tokens, c.sampling(i), (p) => onPiece(i, p), c.abort)));
  }

  private async streamReplies(c: Choices, request: Generation, res: ServerResponse, renderer: InstanceType<ReplyFormat['Renderer']>): Promise<void> {
    res.writeHead(200, SSE_HEADERS);
    if (request.echo) res.write(renderer.deltas(c.seqs.map((_, index) => ({ index, delta: { content: request.echo }, logprobs: null, finish_reason: null }))));
    const results = await this.run(c, (index, p) => {
      res.write(renderer.deltas([{ index, delta: { content: p.content }, logprobs: p.logprobs ? { content: p.logprobs } : null, finish_reason: null }]));
    });
    if (c.abort.aborted) return void res.destroy();
    res.write(renderer.deltas(results.map((r, index) => ({ index, delta: {}, logprobs: null, finish_reason: r.finishReason }))));
    res.end(renderer.end(usageOf(c.tokens, results)));
  }

  private async wholeReplies(c: Choices, request: Generation, res: ServerResponse, render: (completion: Completion) => unknown): Promise<void> {
    const texts = c.seqs.map(() => request.echo);
    const logprobs: TokenLogprob[][] = c.seqs.map(() => []);
    const results = await this.run(c, (i, p) => {
      texts[i] += p.content;
      if (p.logprobs) logprobs[i].push(...p.logprobs);
    });
    if (c.abort.aborted) return;
    const choices: Choice[] = results.map((r, index) => ({
      index,
      message: { role: 'assistant', content: texts[index] },
      logprobs: request.logprobs ? { content: logprobs[index] } : null,
      finish_reason: r.finishReason,
    }));
    sendJson(res, 200, render({ choices, usage: usageOf(c.tokens, results) }));
  }

  private async embed(request: EmbeddingsRequest, res: ServerResponse): Promise<void> {
    const embeddingContextSize = Math.min(this.contextSize, 2048);
    this.embedder ??= this.model.createEmbeddingContext({ contextSize: embeddingContextSize, threads: this.threads });
    const context = await this.embedder;
    const data = [];
    let promptTokens = 0;
    for (const [index, input] of embeddingInputs(request).entries()) {
      const tokens = typeof input === 'string' ? this.model.tokenize(input) : input;
      if (tokens.some((t) => t >= this.vocabSize)) throw invalidParameter('input', `Invalid value for 'input': token ids must be below this model's vocabulary size, ${this.vocabSize}.`);
      checkContextWindow(embeddingContextSize, tokens.length, 0);
      promptTokens += tokens.length;
      const vector = (await context.getEmbeddingFor(tokens as Token[])).vector;
      const dimensioned = request.dimensions != null ? vector.slice(0, request.dimensions) : vector;
      data.push({ index, embedding: request.encoding_format === 'base64' ? base64Vector([...dimensioned]) : [...dimensioned] });
    }
    sendJson(res, 200, renderEmbeddings(this.opts.modelId, { data, promptTokens }, request.encoding_format ?? 'float'));
  }

  async dispose(): Promise<void> {
    await (await this.embedder)?.dispose();
    await this.context.dispose();
    await this.model.dispose();
  }
}

function parsedOrThrow<T>(parsed: T | ApiError): T {
  if (parsed instanceof ApiError) throw parsed;
  return parsed;
}

export async function startEngine(opts: EngineOptions): Promise<RunningEngine> {
  const llama = await localLlama();
  const model = await llama.loadModel({ modelPath: opts.modelPath });
  const threads = opts.threads ?? defaultThreads(llama, model.size);
  const context = await model.createContext({ sequences: opts.parallel, contextSize: opts.contextSize, threads });
  const engine = new LocalEngine(opts, model, context, threads);
  const server: Server = createServer((req, res) => {
    engine.handle(req, res).catch((err) => {
      // A client that left has no one to answer.
      if (err instanceof Cancelled) return void res.destroy();
      if (!(err instanceof ApiError)) console.error('parley engine:', err);
      sendError(res, err instanceof ApiError ? err : internalError());
    });
  });
  try {
    await listen(server, opts.port, opts.host);
  } catch (err) {
    await engine.dispose();
    throw err;
  }
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}/v1`,
    contextSize: engine.contextSize,
    threads: context.idealThreads,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await engine.dispose();
    },
  };
}
