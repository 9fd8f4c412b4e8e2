#!/bin/sh
# Runs every test (installing first if needed). CI runs this through .ci/run.
set -eu
cd "$(dirname "$0")/.."
PARLEY_INSTALL_TEST_TOOLS=1 sh scripts/install.sh
# Tests are type-checked too: vitest runs them without checking types.
npx tsc -p tsconfig.test.json
if [ $# -gt 0 ]; then exec npx vitest run "$@"; fi
# The Redis failover tests time a promotion to the second: they run alone,
# after the rest, so that no other file's engine is taking their CPU.
FAILOVER_TESTS=test/redis/topologies.test.ts
npx vitest run --exclude "$FAILOVER_TESTS"
exec npx vitest run "$FAILOVER_TESTS"
