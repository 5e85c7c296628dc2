# syntax=docker/dockerfile:1
#
# modelservice-operator container image.
#
#   docker build -t ghcr.io/modelservice/modelservice-operator:0.1.0 .
#
# Stage 1 builds a static-enough release binary with the pinned Rust toolchain;
# stage 2 is distroless (glibc + libgcc, no shell, no package manager) and runs
# as the nonroot user (65532), matching the chart's restricted securityContext.

############################ builder ############################
FROM rust:1.95-bookworm AS builder

WORKDIR /build
# Symbols are stripped after the build, not by the release profile: a
# profile setting changes every symbol's hash, and build.rs orders the code
# by those names (link/hot-functions.txt).
ENV CARGO_TERM_COLOR=never

# 1. Dependencies only, cached as their own layer: the manifests and lock file
#    of the workspace (root package + the dev-only members tests/support,
#    tests/fake-model-server and xtask, which Cargo needs to load the
#    workspace), with stub sources for
#    every target Cargo.toml declares (lib, bin, [[bench]] pure, convergence).
#    This layer is rebuilt only when Cargo.toml, Cargo.lock or a member's
#    Cargo.toml change.
#    (.ci/packaging.sh fails if Cargo.toml declares a target without a stub here.)
COPY Cargo.toml Cargo.lock ./
COPY tests/support/Cargo.toml tests/support/Cargo.toml
COPY tests/fake-model-server/Cargo.toml tests/fake-model-server/Cargo.toml
COPY xtask/Cargo.toml xtask/Cargo.toml
RUN mkdir -p src benches/convergence tests/support/src tests/fake-model-server/src xtask/src \
    && echo 'fn main() {}' > src/main.rs \
    && echo 'fn main() {}' > tests/fake-model-server/src/main.rs \
    && echo 'fn main() {}' > xtask/src/main.rs \
    && echo 'fn main() {}' > benches/pure.rs \
    && echo 'fn main() {}' > benches/convergence/main.rs \
    && touch src/lib.rs tests/support/src/lib.rs tests/fake-model-server/src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src target/release/.fingerprint/modelservice-operator-* \
        target/release/deps/modelservice_operator-* \
        target/release/deps/libmodelservice_operator-*

# 2. The operator's real sources, and build.rs with the code order it gives
#    the linker (link/). The benches, tests/support,
#    tests/fake-model-server and xtask keep
#    their stubs: they are dev-only and not part of a release build.
COPY src ./src
COPY build.rs ./
COPY link ./link
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin modelservice-operator \
    && strip target/release/modelservice-operator \
    && ./target/release/modelservice-operator --version

############################ runtime ############################
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="modelservice-operator" \
      org.opencontainers.image.description="Kubernetes operator that serves AI models on GPU nodes from ModelService objects" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/modelservice/modelservice-operator"

COPY --from=builder /build/target/release/modelservice-operator /modelservice-operator

# JSON logs for log pipelines; override with LOG_FORMAT=text.
ENV LOG_FORMAT=json

# /metrics, /healthz and /readyz (METRICS_ADDR, default 0.0.0.0:8080).
# 8080: metrics and health; 9443: the conversion webhook (HTTPS).
EXPOSE 8080 9443

# distroless "nonroot" (numeric, so Kubernetes can verify runAsNonRoot).
USER 65532:65532

ENTRYPOINT ["/modelservice-operator"]
CMD ["run"]
