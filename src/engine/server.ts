// `parley engine`: a GGUF served by llama.cpp (through node-llama-cpp) behind
// the OpenAI Chat Completions API, with `n` as parallel sequences and a real
// prefix cache, and the Embeddings API (the model's mean-pooled hidden state,
// normalized). It is the quickstart's upstream and the tests' real one.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LlamaContextSequence, LlamaEmbeddingContext, Token } from 'node-llama-cpp';
import { parseChatCompletionRequest, requestedMaxTokens, type ChatCompletionRequest } from '../protocol/chat-request.js';
import { base64Vector, embeddingInputs, parseEmbeddingsRequest, renderEmbeddings, type EmbeddingsRequest } from '../protocol/embeddings.js';
import { ChunkRenderer, renderCompletion, type Choice, type ChoiceDelta, type Completion, type ReplyIdentity, type TokenLogprob, type Usage } from '../protocol/chat-response.js';
import { parseCompletionRequest, promptsOf, renderTextCompletion, TextChunkRenderer } from '../protocol/completions.js';
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
};

export interface RunningEngine {
  url: string;
  contextSize: number;
  threads: number;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 16 * 1024 * 1024;

export async function startEngine(opts: EngineOptions): Promise<RunningEngine> {
  const llama = await localLlama();
  const model = await llama.loadModel({ modelPath: opts.modelPath });
  const context = await model.createContext({ sequences: opts.parallel, contextSize: opts.contextSize, threads: opts.threads ?? defaultThreads(llama, model.size) });
  const pool = new SequencePool(context);
  const prompt = new ChatPrompt(model);
  const vocabSize = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const contextSize = context.contextSize;

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/health') return sendJson(res, 200, { status: 'ok' });
    if (req.method === 'GET' && path === '/v1/models') {
      return sendJson(res, 200, { object: 'list', data: [{ id: opts.modelId, object: 'model', created: 0, owned_by: 'parley-engine', context_window: contextSize }] });
    }
    if (req.method === 'POST' && path === '/v1/chat/completions') {
      const parsed = parseChatCompletionRequest(await readJsonBody(req, MAX_BODY_BYTES));
      if (parsed instanceof ApiError) throw parsed;
      return complete(parsed, res);
    }
    if (req.method === 'POST' && path === '/v1/completions') {
      const parsed = parseCompletionRequest(await readJsonBody(req, MAX_BODY_BYTES));
      if (parsed instanceof ApiError) throw parsed;
      const prompts = promptsOf(parsed);
      // The gateway sends a batch's prompts as one call each; this engine serves one at a time.
      if (prompts.length > 1) throw invalidParameter('prompt', 'This engine takes one prompt per request.');
      const text = prompts[0];
      // Raw text, as llama.cpp's server reads a completion's prompt: no chat template, the model's BOS first.
      const tokens = typeof text === 'string' ? [...(model.tokens.bos !== null ? [model.tokens.bos] : []), ...model.tokenize(text)] : (text as Token[]);
      const echo = parsed.echo && typeof text === 'string' ? text : '';
      return generate({ ...parsed, tokens, maxTokens: parsed.max_tokens ?? 16, logprobs: false, topLogprobs: null, echo }, res, 'cmpl-', renderTextCompletion, TextChunkRenderer);
    }
    if (req.method === 'POST' && path === '/v1/embeddings') {
      const parsed = parseEmbeddingsRequest(await readJsonBody(req, MAX_BODY_BYTES));
      if (parsed instanceof ApiError) throw parsed;
      return embed(parsed, res);
    }
    throw routeNotFound(req.method ?? 'GET', path);
  };

  const complete = (request: ChatCompletionRequest, res: ServerResponse) => {
    const tokens = prompt.tokens(request.messages);
    const maxTokens = requestedMaxTokens(request) ?? contextSize - tokens.length;
    return generate({ ...request, tokens, maxTokens, logprobs: request.logprobs === true, topLogprobs: request.top_logprobs ?? 0, echo: '' }, res, 'chatcmpl-', renderCompletion, ChunkRenderer);
  };

  /** Generates `n` replies to `tokens`, whole or streamed, for either API: each brings its reply ids and renderers. */
  const generate = async (
    request: Generation,
    res: ServerResponse,
    idPrefix: string,
    renderWhole: (identity: ReplyIdentity, completion: Completion) => unknown,
    Renderer: new (identity: ReplyIdentity, includeUsage: boolean) => { deltas(choices: ChoiceDelta[]): string; end(usage: Usage): string },
  ) => {
    for (const id of Object.keys(request.logit_bias ?? {})) {
      if (Number(id) >= vocabSize) throw invalidParameter('logit_bias', `Invalid key in 'logit_bias': ${id} is not a token id of this model (vocabulary size ${vocabSize}).`);
    }
    const { tokens, maxTokens } = request;
    checkContextWindow(contextSize, tokens.length, Math.max(maxTokens, 1));
    const n = request.n ?? 1;
    const abort = new AbortController();
    // 'close' also follows a finished reply, when the abort no longer matters.
    res.once('close', () => abort.abort());
    const seqs = await pool.acquire(tokens, n);
    try {
      const baseSeed = request.seed ?? Math.floor(Math.random() * 2 ** 31);
      const stop = request.stop == null ? [] : typeof request.stop === 'string' ? [request.stop] : request.stop;
      const sampling = (i: number): Sampling => ({
        temperature: request.temperature ?? 1,
        topP: request.top_p ?? 1,
        seed: baseSeed + i,
        presencePenalty: request.presence_penalty ?? 0,
        frequencyPenalty: request.frequency_penalty ?? 0,
        logitBias: request.logit_bias ?? {},
        stop: stop.filter((s) => s !== ''),
        maxTokens,
        topLogprobs: request.logprobs ? request.topLogprobs : null,
      });
      const identity: ReplyIdentity = { id: `${idPrefix}${randomUUID()}`, created: Math.floor(Date.now() / 1000), model: opts.modelId, serviceTier: 'default' };
      const run = (onPiece: (i: number, p: Piece) => void) =>
        Promise.all(seqs.map((seq: LlamaContextSequence, i) => generateChoice(model, seq, tokens, sampling(i), (p) => onPiece(i, p), abort.signal)));
      const usage = (results: ChoiceResult[]) => ({
        prompt_tokens: tokens.length,
        completion_tokens: results.reduce((sum, r) => sum + r.completionTokens, 0),
        cached_tokens: Math.min(...results.map((r) => r.cachedTokens)),
      });

      if (request.stream) {
        const renderer = new Renderer(identity, request.stream_options?.include_usage === true);
        res.writeHead(200, SSE_HEADERS);
        if (request.echo) res.write(renderer.deltas(seqs.map((_, index) => ({ index, delta: { content: request.echo }, logprobs: null, finish_reason: null }))));
        const results = await run((index, p) => {
          res.write(renderer.deltas([{ index, delta: { content: p.content }, logprobs: p.logprobs ? { content: p.logprobs } : null, finish_reason: null }]));
        });
        if (abort.signal.aborted) return void res.destroy();
        res.write(renderer.deltas(results.map((r, index) => ({ index, delta: {}, logprobs: null, finish_reason: r.finishReason }))));
        res.end(renderer.end(usage(results)));
        return;
      }
      const texts = seqs.map(() => request.echo);
      const logprobs: TokenLogprob[][] = seqs.map(() => []);
      const results = await run((i, p) => {
        texts[i] += p.content;
        if (p.logprobs) logprobs[i].push(...p.logprobs);
      });
      if (abort.signal.aborted) return;
      const choices: Choice[] = results.map((r, index) => ({
        index,
        message: { role: 'assistant', content: texts[index] },
        logprobs: request.logprobs ? { content: logprobs[index] } : null,
        finish_reason: r.finishReason,
      }));
      sendJson(res, 200, renderWhole(identity, { choices, usage: usage(results) }));
    } finally {
      pool.release(seqs);
    }
  };

  // Made on the first embeddings request: a chat-only engine never pays for a second context.
  let embedder: Promise<LlamaEmbeddingContext> | undefined;
  const embed = async (request: EmbeddingsRequest, res: ServerResponse) => {
    const embeddingContextSize = Math.min(contextSize, 2048);
    embedder ??= model.createEmbeddingContext({ contextSize: embeddingContextSize, threads: opts.threads ?? defaultThreads(llama, model.size) });
    const context = await embedder;
    const data = [];
    let promptTokens = 0;
    for (const [index, input] of embeddingInputs(request).entries()) {
      const tokens = typeof input === 'string' ? model.tokenize(input) : input;
      if (tokens.some((t) => t >= vocabSize)) throw invalidParameter('input', `Invalid value for 'input': token ids must be below this model's vocabulary size, ${vocabSize}.`);
      checkContextWindow(embeddingContextSize, tokens.length, 0);
      promptTokens += tokens.length;
      const vector = (await context.getEmbeddingFor(tokens as Token[])).vector;
      const dimensioned = request.dimensions != null ? vector.slice(0, request.dimensions) : vector;
      data.push({ index, embedding: request.encoding_format === 'base64' ? base64Vector([...dimensioned]) : [...dimensioned] });
    }
    sendJson(res, 200, renderEmbeddings(opts.modelId, { data, promptTokens }, request.encoding_format ?? 'float'));
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      // A client that left has no one to answer.
      if (err instanceof Cancelled) return void res.destroy();
      if (!(err instanceof ApiError)) console.error('parley engine:', err);
      sendError(res, err instanceof ApiError ? err : internalError());
    });
  });
  try {
    await listen(server, opts.port, opts.host);
  } catch (err) {
    await context.dispose();
    await model.dispose();
    throw err;
  }
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}/v1`,
    contextSize,
    threads: context.idealThreads,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await (await embedder)?.dispose();
      await context.dispose();
      await model.dispose();
    },
  };
}
