# syntax=docker/dockerfile:1
# Build: a static binary with the migrations and assets embedded.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/portal ./cmd/portal

# Run: no shell, no package manager, not root. The image expects DATABASE_URL
# (it carries no PostgreSQL binaries for the embedded mode).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portal /usr/local/bin/portal
ENV PORTAL_ADDR=:8080 PORTAL_DATA_DIR=/var/lib/sluice PORTAL_LOG_FORMAT=json
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/portal"]
