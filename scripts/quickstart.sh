#!/bin/sh
# Installs what is missing, then starts Parley on its defaults: a local
# engine on Parley's own generated model, on http://127.0.0.1:${PORT:-8080}/v1.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install.sh
exec bin/parley.js serve "$@"
