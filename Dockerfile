# Parley's image. The Deployment in k8s/ runs it with `serve` arguments:
# the entrypoint is the parley bin, so its args are a parley command.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY tsconfig.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev --no-audit --no-fund --loglevel=error

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY config ./config
# Any user may run it (the Deployment picks uid 10001); the data folder is the one place written at run time.
RUN mkdir -p /var/lib/parley && chown 10001 /var/lib/parley
ENV PARLEY_DATA_DIR=/var/lib/parley
USER 10001
EXPOSE 8080
# Run as an executable: its first line holds the Node flags Parley runs with.
ENTRYPOINT ["/app/bin/parley.js"]
CMD ["serve"]
