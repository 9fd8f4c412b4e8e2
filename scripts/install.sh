#!/bin/sh
# Installs what Parley needs on a fresh machine and builds it. Safe to rerun.
set -eu
cd "$(dirname "$0")/.."

need_node=20
if ! command -v node >/dev/null 2>&1; then
  echo "parley: Node.js $need_node or later is required (https://nodejs.org, or your OS packages)." >&2
  exit 1
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt "$need_node" ]; then
  echo "parley: Node.js $need_node or later is required; this is $(node --version)." >&2
  exit 1
fi

# OS packages Parley runs with: redis-server holds keys and credit when no
# REDIS_URL is given (and the tests start their own).
install_os_package() {
  echo "parley: installing $1"
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get install -y --no-install-recommends "$1" >/dev/null 2>&1 ||
      { $sudo_cmd apt-get update >/dev/null 2>&1 && $sudo_cmd apt-get install -y --no-install-recommends "$1" >/dev/null; }
  elif command -v brew >/dev/null 2>&1; then
    brew install "$2"
  else
    echo "parley: please install $1 with your OS package manager." >&2
    exit 1
  fi
}
if ! command -v redis-server >/dev/null 2>&1; then
  install_os_package redis-server redis
fi
# The platform's browser tests drive Debian's Chromium (never a downloaded browser build).
if [ "${PARLEY_INSTALL_TEST_TOOLS:-0}" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  install_os_package chromium chromium
fi

# Dependencies exactly as the lock file has them; node-llama-cpp brings prebuilt llama.cpp binaries.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "parley: installing dependencies with npm ci (the first time takes a minute or two)"
  npm ci --no-audit --no-fund --loglevel=error
fi
echo "parley: building"
npm run --silent build
# Claude Code's package asks for a newer Node.js than Parley does: say so here rather than leave it to its first run.
if [ "$major" -lt 22 ]; then
  echo "parley: note: Node.js $(node --version) runs Parley; Claude Code's current releases (@anthropic-ai/claude-code 2.1.3xx) ask for Node.js 22 or later. npm warns, but their native binary runs on Node.js 20 too (checked with 2.1.328 and 2.1.332)."
fi

# The agents' and SDKs' tests run the newest releases of the clients as well as the pinned ones (test/agents/):
# kept in a folder of their own, and installed again when the registry has newer ones. The newest openai and AI SDK
# majors ask for Node.js 22 as well; they run on 20 (checked with openai 7.59 and ai 7.0).
if [ "${PARLEY_INSTALL_TEST_TOOLS:-0}" = 1 ]; then
  newest=.parley-test/newest-clients
  want=""
  for package in @anthropic-ai/claude-code @openai/codex openai @anthropic-ai/sdk @openai/agents ai @ai-sdk/openai @ai-sdk/anthropic; do
    if ! version=$(npm view "$package" version); then
      echo "parley: could not ask the npm registry for the newest $package; the tests of the newest clients will fail" >&2
      want=""
      break
    fi
    want="$want $package@$version"
  done
  if [ -n "$want" ] && [ "$(cat "$newest/versions" 2>/dev/null)" != "$want" ]; then
    echo "parley: installing the newest clients for the tests:$want"
    # shellcheck disable=SC2086 # several package specs
    npm install --prefix "$newest" --no-audit --no-fund --loglevel=error $want && echo "$want" > "$newest/versions"
  fi
fi
