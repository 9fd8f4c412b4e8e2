// Starts a gateway: load the routing file, start the local engines it names,
// listen, and swap in each valid new version of the file.
import type { FSWatcher } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { loadRoutingFile, watchRoutingFile } from '../config.js';
import { LocalEngines } from '../engine/supervisor.js';
import { buildRoutingTable, type RoutingTable } from '../routing/routing-table.js';
import { createGatewayServer } from './server.js';

export interface GatewayOptions {
  configPath: string;
  dataDir: string;
  host: string;
  port: number;
}

export interface RunningGateway {
  url: string;
  close(): Promise<void>;
}

export async function startGateway(opts: GatewayOptions): Promise<RunningGateway> {
  const engines = new LocalEngines(opts.dataDir);
  let table: RoutingTable = await buildRoutingTable(loadRoutingFile(opts.configPath), engines);
  const server = createGatewayServer(() => table);
  // Streams can be long; Node's default request timeout would cut them.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;

  const watcher: FSWatcher = watchRoutingFile(
    opts.configPath,
    (file) => {
      buildRoutingTable(file, engines).then(
        (next) => {
          table = next;
          console.log(`parley: routing file reloaded: ${[...next.models.keys()].join(', ')}`);
        },
        (err) => console.error(`parley: routing file not applied: ${err.message}`),
      );
    },
    (err) => console.error(`parley: routing file not applied, still serving the previous one: ${err.message}`),
  );

  await new Promise<void>((resolve) => server.listen(opts.port, opts.host, resolve));
  const { port } = server.address() as AddressInfo;
  const host = opts.host === '0.0.0.0' || opts.host === '::' ? '127.0.0.1' : opts.host;
  return {
    url: `http://${host}:${port}`,
    close: async () => {
      watcher.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await engines.stopAll();
    },
  };
}
