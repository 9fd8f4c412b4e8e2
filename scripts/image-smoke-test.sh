#!/bin/sh
# Builds the Docker image from the Dockerfile with buildah (no Docker engine
# needed) and answers a chat completion through it, against a real engine.
# Where no registry's base image can be pulled, the base `node:20-bookworm-slim`
# is made here first: Debian bookworm from Debian's packages (mmdebstrap) plus
# this machine's Node.js 20 and the certificates it trusts (so that npm ci in
# the build reaches the registry as it does here). The Dockerfile users get
# is the ordinary one.
#
#   sh scripts/image-smoke-test.sh          (as root; apt-get install buildah mmdebstrap)
set -eu
cd "$(dirname "$0")/.."
work=$(mktemp -d)
port=18080
redis_port=16379
cleanup() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null || true
  [ -n "${redis:-}" ] && kill "$redis" 2>/dev/null || true
  buildah rm parley-smoke >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

base=docker.io/library/node:20-bookworm-slim
if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  echo "image-smoke-test: making $base from Debian's packages and this machine's Node.js"
  mmdebstrap --variant=minbase --include=ca-certificates,libstdc++6 bookworm "$work/rootfs.tar" >/dev/null
  ctr=$(buildah from scratch)
  buildah add "$ctr" "$work/rootfs.tar" / >/dev/null
  buildah copy "$ctr" "$(readlink -f "$(command -v node)")" /usr/local/bin/node >/dev/null
  buildah copy "$ctr" "$(dirname "$(readlink -f "$(command -v npm)")")/.." /usr/local/lib/node_modules/npm >/dev/null
  buildah run --isolation chroot "$ctr" -- ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
  buildah copy "$ctr" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
  buildah config --env PATH=/usr/local/bin:/usr/bin:/bin --env NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt "$ctr"
  buildah commit --rm "$ctr" "$base" >/dev/null
fi

echo "image-smoke-test: building the image"
buildah bud --pull=never --isolation chroot --layers -t localhost/parley:smoke . >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }

# The image's Parley on a Redis of the host's (the image has none: production points REDIS_URL at one).
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
redis=$!
cat >"$work/routing.yaml" <<YAML
billing: { demoCredit: 0 }
models:
  - id: parley-tiny
    contextWindow: 4096
    pricesPerMillion: { inputCacheMiss: 0.5, inputCacheHit: 0.05, output: 1.5 }
    endpoints:
      - kind: parley-engine
        local: { contextSize: 2048, parallel: 1 }
YAML
chmod 644 "$work/routing.yaml"
env="--env REDIS_URL=redis://127.0.0.1:$redis_port --env PARLEY_KEY_SECRET=image-smoke-test-secret-0123456789abcdef --env PORT=$port"
buildah from --name parley-smoke localhost/parley:smoke >/dev/null
key=$(buildah run --isolation chroot --user 10001 $env parley-smoke -- /app/bin/parley.js accounts create --email smoke@example.com --credit 1 | sed -n 's/.*API key (shown once): //p')
# The entrypoint, as the Deployment runs it: the bin, with a `serve` command.
buildah run --isolation chroot --user 10001 $env -v "$work/routing.yaml:/etc/parley/routing.yaml:ro" parley-smoke -- \
  /app/bin/parley.js serve --config /etc/parley/routing.yaml >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 1
done
reply=$(curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' -H "authorization: Bearer $key" \
  -d '{"model": "parley-tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}') || { cat "$work/serve.log"; exit 1; }
echo "$reply" | grep -q '"object":"chat.completion"' || { echo "image-smoke-test: unexpected reply: $reply"; exit 1; }
echo "image-smoke-test: the image answered: $reply"
