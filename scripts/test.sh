#!/bin/sh
# Runs every test (installing first if needed). CI runs this through .ci/run.
set -eu
cd "$(dirname "$0")/.."
PARLEY_INSTALL_TEST_TOOLS=1 sh scripts/install.sh
# Tests are type-checked too: vitest runs them without checking types.
npx tsc -p tsconfig.test.json
exec npx vitest run "$@"
