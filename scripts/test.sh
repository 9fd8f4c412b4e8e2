#!/bin/sh
# Runs every test (installing first if needed). CI runs this through .ci/run.
set -eu
cd "$(dirname "$0")/.."
PARLEY_INSTALL_TEST_TOOLS=1 sh scripts/install.sh
exec npx vitest run "$@"
