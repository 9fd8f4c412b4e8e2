// A scripted upstream for what a real engine cannot be made to do on cue:
// another server's dialect, a failure, a stall. Each test gives it a script.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, any>;
}

export type Script = (req: ReceivedRequest, res: ServerResponse) => void | Promise<void>;

export interface FakeUpstream {
  url: string;
  received: ReceivedRequest[];
  /** Resolves when the gateway's connection for a request closes before the script ended it. */
  aborted: Promise<void>;
  setScript(script: Script): void;
  close(): Promise<void>;
}

export async function startFakeUpstream(initial: Script): Promise<FakeUpstream> {
  let script = initial;
  const received: ReceivedRequest[] = [];
  let markAborted: () => void = () => {};
  const aborted = new Promise<void>((resolve) => (markAborted = resolve));
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const request = { path: req.url ?? '/', headers: req.headers, body: text ? JSON.parse(text) : {} };
    received.push(request);
    res.on('close', () => {
      if (!res.writableEnded) markAborted();
    });
    await script(request, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    received,
    aborted,
    setScript: (s) => (script = s),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The chat completions the upstream has been sent, by path: its health probe may come meanwhile. */
export const chatCalls = (upstream: Pick<FakeUpstream, 'received'>) => upstream.received.filter((r) => r.path.endsWith('/chat/completions')).length;

/** An OpenAI-style stream chunk for choice 0. */
export function chunk(delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) {
  return { id: 'up-1', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta, finish_reason: finish }], ...extra };
}

/** Writes a stream of `data:` events; `separator` lets a test drop the space after the colon. */
export function writeEvents(res: ServerResponse, events: unknown[], { done = true, separator = ' ' } = {}) {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const e of events) res.write(`data:${separator}${JSON.stringify(e)}\n\n`);
  if (done) res.write(`data:${separator}[DONE]\n\n`);
  res.end();
}

/** Answers with a JSON body. */
export function replyJson(res: ServerResponse, body: unknown, status = 200): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

export function completionBody(content: string, usage: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return {
    id: 'up-1', object: 'chat.completion', created: 1, model: 'up',
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    usage, ...extra,
  };
}

/** Resolves once `check` holds, polling; throws past `timeoutMs`. */
export async function until(check: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(20);
  }
}

/** A vLLM-style upstream that answers `n` choices with the usage a test sets. */
export function answering(usage: { prompt_tokens: number; completion_tokens: number; cached?: number }): Script {
  const u = { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, total_tokens: usage.prompt_tokens + usage.completion_tokens, prompt_tokens_details: { cached_tokens: usage.cached ?? 0 } };
  return (req, res) => {
    const n = req.body.n ?? 1;
    if (req.body.stream) {
      const deltas = Array.from({ length: n }, (_, i) => ({ ...chunk({ content: `reply ${i}` }), choices: [{ index: i, delta: { content: `reply ${i}` }, finish_reason: 'stop' }] }));
      return writeEvents(res, [...deltas, { ...chunk({}), choices: [], usage: u }]);
    }
    const body = completionBody('x', u);
    body.choices = Array.from({ length: n }, (_, i) => ({ index: i, message: { role: 'assistant', content: `reply ${i}` }, finish_reason: 'stop' }));
    replyJson(res, body);
  };
}

/** The usage the agent-API scripts below report: 64 of 100 prompt tokens cached, 2 of 5 reply tokens reasoning. */
export const AGENT_USAGE = { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 }, completion_tokens_details: { reasoning_tokens: 2 } };

/** Answers "Hello there" (reasoning first where given), whole or streamed, finishing as `finish` says; the gateway's probe gets a model list. */
export const greeting = (reasoning?: string, finish = 'stop'): Script => (req, res) => {
  if (!req.path.endsWith('/chat/completions')) return replyJson(res, { data: [] });
  if (req.body.stream) {
    return writeEvents(res, [
      chunk({ role: 'assistant', content: '' }),
      ...(reasoning ? [chunk({ reasoning_content: reasoning })] : []),
      chunk({ content: 'Hello' }),
      chunk({ content: ' there' }),
      chunk({}, finish),
      { ...chunk({}), choices: [], usage: AGENT_USAGE },
    ]);
  }
  const body = completionBody('Hello there', AGENT_USAGE);
  body.choices[0].finish_reason = finish;
  if (reasoning) (body.choices[0].message as Record<string, unknown>).reasoning_content = reasoning;
  replyJson(res, body);
};

/** Calls `tool` with {"city": "Paris"} (its arguments streamed in two pieces), and once a tool message comes, answers "It is <result>.". */
export const callingTool = (tool: string): Script => (req, res) => {
  const result = req.body.messages.find((m: { role: string }) => m.role === 'tool');
  if (result) return replyJson(res, completionBody(`It is ${result.content}.`, AGENT_USAGE));
  const call = { index: 0, id: 'call_1', type: 'function', function: { name: tool, arguments: '' } };
  if (req.body.stream) {
    return writeEvents(res, [
      chunk({ role: 'assistant', content: null, tool_calls: [call] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
      chunk({}, 'tool_calls'),
      { ...chunk({}), choices: [], usage: AGENT_USAGE },
    ]);
  }
  const body = completionBody('', AGENT_USAGE);
  body.choices[0] = { index: 0, message: { role: 'assistant', content: null, tool_calls: [{ ...call, function: { name: tool, arguments: '{"city":"Paris"}' } }] } as never, finish_reason: 'tool_calls' };
  replyJson(res, body);
};
