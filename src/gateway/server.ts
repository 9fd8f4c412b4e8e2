// The gateway's HTTP server: routes each request to its handler and turns
// every failure into OpenAI's error body.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { ApiError, internalError, routeNotFound } from '../protocol/errors.js';
import { sendError, sendJson } from '../protocol/http-io.js';
import type { RoutingTable } from '../routing/routing-table.js';
import { handleChatCompletion } from './chat-completions.js';
import { getModel, listModels } from './models-routes.js';

export function createGatewayServer(routing: () => RoutingTable): Server {
  const route = async (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    const table = routing();
    if (method === 'POST' && path === '/v1/chat/completions') return handleChatCompletion(req, res, table);
    if (method === 'GET' && path === '/v1/models') return listModels(res, table);
    if (method === 'GET' && path.startsWith('/v1/models/')) return getModel(res, table, decodeURIComponent(path.slice('/v1/models/'.length)));
    if (method === 'GET' && (path === '/healthz' || path === '/readyz')) return sendJson(res, 200, { status: 'ok' });
    throw routeNotFound(method, path);
  };
  return createServer((req, res) => {
    route(req, res).catch((err) => {
      if (!(err instanceof ApiError)) {
        if ((err as Error)?.name === 'AbortError') return void res.destroy();
        console.error('parley:', err);
      }
      sendError(res, err instanceof ApiError ? err : internalError());
    });
  });
}
