// The Grafana dashboard and the Prometheus alert rules that ship with the
// manifests read only metrics and labels a live Parley exports: after
// traffic on every API, each name and label their queries use is on its
// /metrics, so the two cannot drift apart.
import Anthropic from '@anthropic-ai/sdk';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chunk, completionBody, replyJson, startFakeUpstream, writeEvents, type FakeUpstream } from '../support/fake-upstream.js';
import { modelEntry, postChat, startTestGateway, type TestGateway } from '../support/gateway.js';

const monitoring = new URL('../../k8s/monitoring/', import.meta.url);
const dashboard = JSON.parse(readFileSync(new URL('grafana-dashboard.json', monitoring), 'utf8'));
const rules = parse(readFileSync(new URL('prometheus-rules.yaml', monitoring), 'utf8'));
const queries: string[] = [
  ...dashboard.panels.flatMap((p: { targets: { expr: string }[] }) => p.targets.map((t) => t.expr)),
  ...rules.spec.groups.flatMap((g: { rules: { expr: string }[] }) => g.rules.map((r) => r.expr)),
];

/** The metric names a query reads, and the labels it names on each (in its matchers and its `by (...)`). */
function readsOf(query: string): Map<string, Set<string>> {
  const reads = new Map<string, Set<string>>();
  const grouping = [...query.matchAll(/by \(([^)]*)\)/g)].flatMap((m) => m[1].split(',').map((l) => l.trim())).filter((l) => l && l !== 'le' && l !== 'instance');
  // Past its groupings, what is left names metrics, each with its matchers.
  for (const m of query.replace(/by \([^)]*\)/g, '').matchAll(/\b((?:gen_ai|parley)_[a-z_]+)(\{([^}]*)\})?/g)) {
    const labels = reads.get(m[1]) ?? new Set<string>();
    for (const matcher of (m[3] ?? '').split(',').filter(Boolean)) labels.add(matcher.split(/[=!~]/)[0].trim());
    for (const label of grouping) labels.add(label);
    reads.set(m[1], labels);
  }
  return reads;
}

let upstream: FakeUpstream;
let gw: TestGateway;
beforeAll(async () => {
  upstream = await startFakeUpstream((req, res) => {
    const usage = { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 64 } };
    if (req.path.endsWith('/embeddings')) return replyJson(res, { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2] }], model: 'm', usage: { prompt_tokens: 3, total_tokens: 3 } });
    if (req.path.endsWith('/completions') && !req.path.endsWith('/chat/completions')) return replyJson(res, { id: 'c', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: 'hi', finish_reason: 'stop' }], usage });
    if (req.body.stream) return writeEvents(res, [chunk({ role: 'assistant', content: 'hi' }), chunk({ content: ' there' }), { ...chunk({}, 'stop'), usage }]);
    replyJson(res, completionBody('hi', usage));
  });
  gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: upstream.url, maxConcurrent: 4 }], { api: ['chat', 'completions', 'embeddings'] })] });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});

describe('the dashboard and the alert rules', () => {
  it('read only metric names and labels that a Parley serving every API exports', async () => {
    const messages = [{ role: 'user' as const, content: 'hi' }];
    await gw.client.chat.completions.create({ model: 'm', messages });
    await (await postChat(gw, { model: 'm', messages, stream: true })).text();
    await postChat(gw, { model: 'nope', messages });
    await gw.client.completions.create({ model: 'm', prompt: 'hi', max_tokens: 4 });
    await gw.client.embeddings.create({ model: 'm', input: 'hi' });
    await gw.client.responses.create({ model: 'm', input: 'hi' });
    await new Anthropic({ baseURL: gw.url, apiKey: gw.apiKey, maxRetries: 0 }).messages.create({ model: 'm', max_tokens: 8, messages });
    const scraped = (await (await fetch(`${gw.url}/metrics`)).text()).split('\n').filter((l) => l && !l.startsWith('#'));
    const exported = new Map<string, Set<string>>();
    for (const line of scraped) {
      const [, name, labels = ''] = /^([a-z_]+)(?:\{(.*)\})? /.exec(line)!;
      const names = exported.get(name) ?? new Set<string>();
      for (const m of labels.matchAll(/([a-z_]+)="/g)) names.add(m[1]);
      exported.set(name, names);
    }
    expect(queries.length).toBeGreaterThanOrEqual(18);
    for (const query of queries) {
      for (const [metric, labels] of readsOf(query)) {
        expect(exported.has(metric), `${metric}, read by ${query}`).toBe(true);
        for (const label of labels) expect(exported.get(metric), `${metric}'s label ${label}, read by ${query}`).toContain(label);
      }
    }
    // Every API's operation is on the GenAI duration metric.
    const operations = scraped.filter((l) => l.startsWith('gen_ai_server_request_duration_count')).map((l) => /gen_ai_operation_name="([a-z_]+)"/.exec(l)![1]);
    expect(new Set(operations)).toEqual(new Set(['chat', 'text_completion', 'embeddings']));
  });
});
