# Parley's image. The Deployment in k8s/ runs it with `serve` arguments:
# the entrypoint is the parley bin, so its args are a parley command.
FROM node:20-bookworm-slim AS build
WORKDIR /app
# The native stream reader (native/) is compiled here; the image that runs Parley needs no compiler.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm install --no-audit --no-fund --loglevel=error
COPY tsconfig.json binding.gyp ./
COPY src ./src
COPY native ./native
COPY scripts/build-native.mjs ./scripts/
RUN npm run build && npm prune --omit=dev --no-audit --no-fund --loglevel=error

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/build/Release/content_runs.node ./build/Release/
COPY bin ./bin
COPY config ./config
# Any user may run it (the Deployment picks uid 10001); nothing in /app is written at run time.
USER 10001
EXPOSE 8080
# Run as an executable: its first line holds the Node flags Parley runs with.
ENTRYPOINT ["/app/bin/parley.js"]
CMD ["serve"]
