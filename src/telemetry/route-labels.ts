// The `route` label of a request's metrics and span: one of a fixed set, so
// that a scan of random URLs (no key needed) cannot add series to /metrics
// and grow Parley's memory or its Prometheus's. Ids in a path (a model, a
// key) are never part of a label either.
const EXACT_PATHS = new Set([
  '/',
  '/healthz',
  '/readyz',
  '/metrics',
  '/v1/chat/completions',
  '/v1/embeddings',
  '/v1/completions',
  '/v1/messages',
  '/v1/messages/count_tokens',
  '/v1/responses',
  '/v1/models',
  '/user/balance',
  '/admin/endpoints',
  '/platform',
  '/platform/login',
  '/platform/logout',
  '/platform/signup',
  '/platform/api-keys',
  '/platform/models',
  '/platform/usage',
  '/platform/usage.csv',
  '/platform/top-up',
  '/platform/static/style.css',
  '/platform/static/platform.js',
  '/platform/static/favicon.svg',
  '/favicon.ico',
]);

const PATH_TEMPLATES: [prefix: string, template: string][] = [
  ['/v1/models/', '/v1/models/{id}'],
  ['/v1/responses/', '/v1/responses/{id}'],
  ['/platform/models/', '/platform/models/{id}'],
  ['/platform/api-keys/', '/platform/api-keys/{id}/{revoke or limits}'],
  ['/admin/v1/', '/admin/v1/{operation}'],
];

const METHODS = new Set(['GET', 'POST', 'HEAD', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** Every path Parley does not serve shares this label. */
export const UNMATCHED_ROUTE = 'unmatched';

export function routeLabel(method: string, path: string): string {
  const verb = METHODS.has(method) ? method : 'OTHER';
  if (EXACT_PATHS.has(path)) return `${verb} ${path}`;
  for (const [prefix, template] of PATH_TEMPLATES) if (path.startsWith(prefix)) return `${verb} ${template}`;
  return `${verb} ${UNMATCHED_ROUTE}`;
}
