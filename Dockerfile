# syntax=docker/dockerfile:1
# Multi-stage build: a Rust toolchain image compiles the release binary; the runtime image
# is distroless (glibc, CA certificates, no shell, no package manager) and runs as the
# non-root user 65532. Build: docker build -t massgen .
FROM rust:1.89-slim-bookworm AS build
WORKDIR /src
# jemalloc (the default allocator) is built from C with its own configure and make.
RUN apt-get update && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
# jemalloc's settings (background purging), read when it is built.
COPY .cargo ./.cargo
COPY src ./src
COPY crates ./crates
# Cargo checks that every target the manifest declares exists ([[test]] mcp, [[bench]],
# [[example]] bench_driver), even when only the binary is built.
COPY tests ./tests
COPY benches ./benches
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin massgen \
    && cp target/release/massgen /massgen \
    && strip /massgen
# The records folder, empty: copied into the runtime image owned by its user (no shell there).
RUN install -d -m 0700 /records

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /massgen /usr/local/bin/massgen
COPY --from=build --chown=65532:65532 /records /var/lib/massgen
# Listen on every interface inside the container; the panel config is mounted at
# /etc/massgen/config.yaml (ConfigMap or bind mount); API keys and provider keys come from
# the environment (Secret). Logs are JSON lines on stderr. Session records go to a SQLite
# file in the volume below (one container per file); replicas share a PostgreSQL database
# instead (MASSGEN_SERVER_RECORDS_DB=postgres://…, see deploy/).
ENV MASSGEN_SERVER_HOST=0.0.0.0 \
    MASSGEN_SERVER_PORT=4000 \
    MASSGEN_SERVER_DEFAULT_CONFIG=/etc/massgen/config.yaml \
    MASSGEN_SERVER_RECORDS_DB=sqlite:///var/lib/massgen/records.db \
    MASSGEN_LOG_FORMAT=json
VOLUME /var/lib/massgen
EXPOSE 4000
USER 65532:65532
# No curl in a distroless image: the binary checks its own /health.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/massgen", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/massgen"]
CMD ["serve"]
