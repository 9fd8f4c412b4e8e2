// GET /v1/models and GET /v1/models/{id}, from the routing table: only the
// models the caller's key may call (a key learns nothing of the others).
import type { ServerResponse } from 'node:http';
import type { Caller } from '../accounts/key-authenticator.js';
import { modelNotFound } from '../protocol/errors.js';
import { sendJson } from '../protocol/http-io.js';
import type { RoutedModel, RoutingTable } from '../routing/routing-table.js';

function modelObject(m: RoutedModel) {
  return {
    id: m.config.id,
    object: 'model',
    created: 0,
    owned_by: 'parley',
    context_window: m.config.contextWindow,
    pricing_per_million_tokens: {
      input_cache_miss: m.config.pricesPerMillion.inputCacheMiss,
      input_cache_hit: m.config.pricesPerMillion.inputCacheHit,
      output: m.config.pricesPerMillion.output,
    },
    aliases: m.config.aliases,
    supports: { tools: m.config.supports.tools, json_output: m.config.supports.jsonOutput },
    /** The APIs the model serves: chat (/v1/chat/completions), completions (/v1/completions), embeddings (/v1/embeddings). */
    api: m.config.api,
  };
}

const mayCall = (caller: Caller, id: string) => caller.models === null || caller.models.includes(id);

/** A model as Anthropic's Models API lists it, for a client that sent `anthropic-version`: its window as `max_input_tokens`, which Claude Code reads. */
const anthropicModelObject = (m: RoutedModel) => ({
  type: 'model',
  id: m.config.id,
  display_name: m.config.id,
  created_at: '1970-01-01T00:00:00Z',
  max_input_tokens: m.config.contextWindow,
  max_tokens: m.config.contextWindow,
});

/**
 * A model as Codex's model catalog describes it (its `GET /models?client_version=`): the fields its reader
 * requires (Codex 0.169 to 0.171 refuse the whole catalog without any one of them), the window it compacts by,
 * and the instructions it then sends in place of its own. Tools as Codex's fallback for an unknown model has them.
 */
const codexModelObject = (m: RoutedModel, instructions: string) => ({
  slug: m.config.id,
  display_name: m.config.id,
  description: m.config.description,
  base_instructions: instructions,
  context_window: m.config.contextWindow,
  max_context_window: m.config.contextWindow,
  supported_reasoning_levels: [],
  shell_type: 'default',
  visibility: 'list',
  supported_in_api: true,
  priority: 0,
  support_verbosity: false,
  truncation_policy: { mode: 'bytes', limit: 10_000 },
  experimental_supported_tools: [],
});

export type ListShape = 'openai' | 'anthropic' | 'codex';

export function listModels(res: ServerResponse, table: RoutingTable, caller: Caller, shape: ListShape): void {
  const models = [...table.models.values()].filter((m) => mayCall(caller, m.config.id));
  if (shape === 'openai') return sendJson(res, 200, { object: 'list', data: models.map(modelObject) });
  if (shape === 'codex') return sendJson(res, 200, { models: models.flatMap((m) => (m.config.agentInstructions ? [codexModelObject(m, m.config.agentInstructions)] : [])) });
  const data = models.map(anthropicModelObject);
  sendJson(res, 200, { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
}

export function getModel(res: ServerResponse, table: RoutingTable, caller: Caller, id: string, shape: ListShape): void {
  const model = table.models.get(id);
  if (!model || !mayCall(caller, id)) throw modelNotFound(id);
  sendJson(res, 200, shape === 'anthropic' ? anthropicModelObject(model) : modelObject(model));
}
