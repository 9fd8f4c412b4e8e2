// The Prometheus endpoint on a port of its own (`--metrics-port`), for a
// deployment whose API port its tenants reach: the metrics name the
// upstream endpoints' addresses and, with `gateway.metricsTopAccounts`, the
// accounts that use the most, which are operators' to read, not tenants'.
import { createServer, type Server } from 'node:http';
import type { Telemetry } from './telemetry.js';

export function createMetricsServer(telemetry: Telemetry): Server {
  return createServer((req, res) => {
    if (req.method === 'GET' && req.url?.split('?')[0] === '/metrics') return telemetry.serveMetrics(req, res);
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: this port serves GET /metrics\n');
  });
}
