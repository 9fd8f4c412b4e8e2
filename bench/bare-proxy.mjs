// The reference: a bare http-proxy-3 pass-through with no validation,
// no rewriting and no metering.
import { createServer } from 'node:http';
import { Agent } from 'node:http';
import { createProxyServer } from 'http-proxy-3';

const [target, port] = [process.argv[2], Number(process.argv[3] ?? 0)];
const proxy = createProxyServer({ target, agent: new Agent({ keepAlive: true, maxSockets: 256 }) });
proxy.on('error', (_err, _req, res) => res.end?.());
const server = createServer((req, res) => proxy.web(req, res));
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => process.send?.({ port: server.address().port }));
