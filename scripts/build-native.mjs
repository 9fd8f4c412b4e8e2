// Builds the native reader of streamed replies (native/, binding.gyp) with
// the node-gyp that comes with npm, against this Node's own headers, where
// the machine can: it needs python3, make and a C++ compiler. Where it cannot,
// Parley reads streams with its JavaScript path alone, so a failed build is
// reported and the build goes on. A build newer than its sources is kept.
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const built = join(root, 'build/Release/content_runs.node');
const sources = ['native/content-runs.cc', 'binding.gyp'].map((f) => join(root, f));

const mtime = (file) => statSync(file).mtimeMs;
if (existsSync(built) && sources.every((s) => mtime(s) <= mtime(built))) process.exit(0);

// npm names its node-gyp to the scripts it runs; run by hand, it is found beside npm.
const nodeGyp = process.env.npm_config_node_gyp ?? join(dirname(process.execPath), '../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js');
// Node's own headers, where it was installed with them, spare node-gyp a download.
const prefix = join(dirname(process.execPath), '..');
const nodeDir = process.env.npm_config_nodedir ?? (existsSync(join(prefix, 'include/node/node_api.h')) ? prefix : undefined);

const args = [nodeGyp, 'rebuild', ...(nodeDir ? [`--nodedir=${nodeDir}`] : [])];
const run = existsSync(nodeGyp) ? spawnSync(process.execPath, args, { cwd: root, encoding: 'utf8' }) : undefined;
if (run?.status !== 0) {
  const why = !run ? 'node-gyp was not found' : (run.stderr.split('\n').find((l) => /error/i.test(l)) ?? `node-gyp exited with ${run.status}`).trim();
  console.warn(`parley: the native stream reader was not built (${why}); streams are read by the JavaScript path alone`);
}
