// The Kubernetes manifests agree with the code: ports, probe paths, the
// routing file they mount, the environment variables Parley reads, the
// Secret's names and the shutdown grace period.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseRoutingFile } from '../../src/config.js';
import { modelEntry, startTestGateway, type TestGateway } from '../support/gateway.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const K8S = join(ROOT, 'k8s');
type Doc = Record<string, any>;
const docs: Doc[] = readdirSync(K8S)
  .filter((f) => f.endsWith('.yaml'))
  .flatMap((f) => parseAllDocuments(readFileSync(join(K8S, f), 'utf8')).map((d) => d.toJS() as Doc));
const find = (kind: string, name: string) => docs.find((d) => d.kind === kind && d.metadata.name === name)!;
const deployment = find('Deployment', 'parley');
const pod = deployment.spec.template.spec;
const container = pod.containers[0];
const env = Object.fromEntries(container.env.map((e: { name: string; value: string }) => [e.name, e.value]));
const routingText = find('ConfigMap', 'parley-routing').data['routing.yaml'];
const routing = parseRoutingFile(routingText, 'k8s/configmap.yaml', '/etc/parley');
const secret = find('Secret', 'parley-secrets').stringData;

/** Every `process.env.NAME` the source reads. */
function envNamesInSource(dir: string): Set<string> {
  const names = new Set<string>();
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) for (const n of envNamesInSource(path)) names.add(n);
    else if (entry.name.endsWith('.ts')) for (const m of readFileSync(path, 'utf8').matchAll(/process\.env\.([A-Z_]+)/g)) names.add(m[1]);
  }
  return names;
}

describe('the manifests', () => {
  it('parse, and every one names its namespace', () => {
    expect(docs.length).toBeGreaterThanOrEqual(9);
    for (const d of docs.filter((x) => x.kind !== 'Namespace')) expect(d.metadata.namespace, `${d.kind} ${d.metadata.name}`).toBe('parley');
  });

  it('set only environment variables Parley reads, and the Secret holds the ones it needs', () => {
    const read = envNamesInSource(join(ROOT, 'src'));
    for (const name of Object.keys(env)) if (!name.startsWith('OTEL_')) expect(read, name).toContain(name);
    expect(read).toContain('PARLEY_KEY_SECRET');
    expect(secret.PARLEY_KEY_SECRET.length).toBeGreaterThanOrEqual(32);
    for (const m of routing.models) for (const e of m.endpoints) if (e.apiKeyEnv) expect(Object.keys(secret)).toContain(e.apiKeyEnv);
    expect(container.envFrom[0].secretRef.name).toBe('parley-secrets');
  });

  it('listen where the Service and probes look', () => {
    const port = container.ports.find((p: { name: string }) => p.name === 'http');
    expect(String(port.containerPort)).toBe(env.PORT);
    expect(find('Service', 'parley').spec.ports[0].targetPort).toBe('http');
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'http' });
    expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
    expect(find('Service', 'parley').spec.selector).toEqual(deployment.spec.template.metadata.labels);
  });

  it('serve the metrics on a port of their own, where Prometheus scrapes and the Service does not reach', () => {
    const metrics = container.ports.find((p: { name: string }) => p.name === 'metrics');
    expect(String(metrics.containerPort)).toBe(env.METRICS_PORT);
    expect(deployment.spec.template.metadata.annotations['prometheus.io/port']).toBe(env.METRICS_PORT);
    expect(find('Service', 'parley').spec.ports.map((p: { targetPort: string }) => p.targetPort)).toEqual(['http']);
  });

  it('run an image whose entrypoint is the parley bin, listening where the Deployment says, as the Deployment\'s user', () => {
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    const final = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    // The bin runs as an executable, so its first line's Node flags apply in the image too.
    expect(final).toContain('WORKDIR /app');
    expect(final).toContain('ENTRYPOINT ["/app/bin/parley.js"]');
    expect(readFileSync(join(ROOT, 'bin/parley.js'), 'utf8')).toMatch(/^#!\/usr\/bin\/env -S node --max-semi-space-size=64\n/);
    expect(container.args[0]).toBe('serve');
    expect(final).toMatch(new RegExp(`ENV .*PORT=${env.PORT}`));
    expect(final).toContain(`EXPOSE ${env.PORT}`);
    expect(final).toContain(`USER ${pod.securityContext.runAsUser}`);
    // What bin/parley.js loads is in the image.
    expect(readFileSync(join(ROOT, 'bin/parley.js'), 'utf8')).toContain("'../dist/main.js'");
    for (const copied of ['./dist', './node_modules', './bin', 'package.json']) expect(final).toContain(copied);
  });

  it('mount the routing file as a directory, where --config points, so edits reach the pod', () => {
    const config = container.args[container.args.indexOf('--config') + 1];
    const mount = container.volumeMounts.find((m: { name: string }) => m.name === 'routing');
    expect(mount.subPath).toBeUndefined();
    expect(dirname(config)).toBe(mount.mountPath);
    expect(routing.models.length).toBeGreaterThan(0);
  });

  it('give the pod longer to stop than Parley drains for', () => {
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(routing.gateway.shutdownGraceMs + 5_000);
  });

  it("keep the Redis they run below its container's memory, refusing writes when full rather than evicting keys", () => {
    const redis = find('StatefulSet', 'parley-redis').spec.template.spec.containers[0];
    const arg = (name: string) => redis.args[redis.args.indexOf(name) + 1];
    expect(arg('--maxmemory-policy')).toBe('noeviction');
    const [, megabytes] = /^(\d+)mb$/.exec(arg('--maxmemory'))!;
    const [, gibibytes] = /^(\d+)Gi$/.exec(redis.resources.limits.memory)!;
    expect(Number(megabytes) * 2 ** 20).toBeLessThan(Number(gibibytes) * 2 ** 30);
  });

  it('point REDIS_URL at the Redis Service, and scale and protect the Deployment', () => {
    const url = new URL(env.REDIS_URL);
    const redisService = find('Service', url.hostname);
    expect(redisService.spec.ports[0].port).toBe(Number(url.port));
    expect(find('StatefulSet', 'parley-redis').spec.template.spec.containers[0].args).toContain('--appendonly');
    expect(find('HorizontalPodAutoscaler', 'parley').spec.scaleTargetRef.name).toBe('parley');
    expect(find('PodDisruptionBudget', 'parley').spec.selector.matchLabels).toEqual(deployment.spec.selector.matchLabels);
    expect(find('PodDisruptionBudget', 'parley').spec.minAvailable).toBeLessThan(find('HorizontalPodAutoscaler', 'parley').spec.minReplicas);
  });
});

describe('the probe paths on a running gateway', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway({ models: [modelEntry('m', [{ kind: 'vllm', url: 'http://127.0.0.1:9/v1' }])] });
  });
  afterAll(() => gw.close());

  it('answer 200 without an API key', async () => {
    for (const probe of [container.readinessProbe, container.livenessProbe]) {
      expect((await fetch(`${gw.url}${probe.httpGet.path}`)).status).toBe(200);
    }
  });

  it('readiness fails while Redis is unreachable', async () => {
    await gw.redis.kill();
    expect((await fetch(`${gw.url}${container.readinessProbe.httpGet.path}`)).status).toBe(503);
    expect((await fetch(`${gw.url}${container.livenessProbe.httpGet.path}`)).status).toBe(200);
    await gw.redis.restart();
  });
});
