# syntax=docker/dockerfile:1
# Build: a static binary with the migrations and assets embedded.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/portal ./cmd/portal
# The data directory, owned by the user the portal runs as (distroless's
# nonroot, 65532): a fresh volume mounted there starts as a copy of it, so
# the portal can write its generated session secret on first start.
RUN mkdir -p /out/data && chown 65532:65532 /out/data && chmod 0700 /out/data

# Run: no shell, no package manager, not root. The image expects DATABASE_URL
# (it carries no PostgreSQL binaries for the embedded mode).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portal /usr/local/bin/portal
COPY --from=build --chown=65532:65532 /out/data /var/lib/sluice
# HTTP (console, APIs, /v1/check) and Envoy's rate-limit service over gRPC
# (beyond the container's loopback only with PORTAL_GRPC_TOKEN set).
ENV PORTAL_ADDR=:8080 PORTAL_GRPC_ADDR=:8081 PORTAL_DATA_DIR=/var/lib/sluice PORTAL_LOG_FORMAT=json
EXPOSE 8080 8081
VOLUME /var/lib/sluice
USER 65532:65532
# distroless has no shell or curl: the portal checks itself (GET /readyz).
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD ["/usr/local/bin/portal", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/portal"]
