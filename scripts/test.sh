#!/bin/sh
# Runs every test (installing first if needed). CI runs this through .ci/run.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install.sh
exec npx vitest run "$@"
