# syntax=docker/dockerfile:1.7
#
# meshdns container image: a static binary on distroless/static, running as uid 65532.
#
#   docker build -t meshdns:dev .
#   # CI, with a layer cache shared between runs (the dependency layer below is what it reuses):
#   docker buildx build --cache-from type=registry,ref=REG/meshdns:buildcache \
#       --cache-to type=registry,ref=REG/meshdns:buildcache,mode=max -t REG/meshdns:TAG .
#
# Caching, in order of what a change invalidates:
#   1. `chef` installs cargo-chef once (changes only with RUST_VERSION / CHEF_VERSION);
#   2. `planner` reduces the manifests to a recipe (dependencies only);
#   3. `builder` compiles the dependencies from the recipe: this layer is rebuilt only when
#      Cargo.toml/Cargo.lock change, and it is what an exported layer cache carries;
#   4. the crate itself is compiled last. The cargo registry/git are cache mounts everywhere;
#      the target dir is a cache mount too (incremental on builders that keep their cache),
#      seeded from the dependency layer when it is empty (fresh CI runners).
# The release profile (LTO fat, 1 codegen unit, panic=abort, strip) comes from Cargo.toml.

ARG RUST_VERSION=1.95
ARG TARGET=x86_64-unknown-linux-musl

FROM rust:${RUST_VERSION}-slim-bookworm AS chef
ARG TARGET
ARG CHEF_VERSION=0.1.78
# musl-tools: musl-gcc, for any C code a build script compiles. Build stage only, so the
# versions are the distribution's current ones rather than pins.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add "${TARGET}"
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    cargo install cargo-chef --locked --version "${CHEF_VERSION}"
WORKDIR /build

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
ARG TARGET
COPY --from=planner /build/recipe.json recipe.json
# Dependency layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    cargo chef cook --release --locked --target "${TARGET}" --recipe-path recipe.json
# The whole (trimmed, see .dockerignore) context: Cargo.toml may name bench/test/example
# targets whose files must exist for the manifest to load.
COPY . .
# The crate. The binary is copied out of the cache-mounted target dir within the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=meshdns-target,target=/build/target-cache,sharing=locked \
    if [ ! -d "/build/target-cache/${TARGET}" ]; then cp -a /build/target/. /build/target-cache/; fi \
 && CARGO_TARGET_DIR=/build/target-cache cargo build --release --locked --target "${TARGET}" --bin meshdns \
 && cp "/build/target-cache/${TARGET}/release/meshdns" /meshdns \
 && /meshdns --version

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="meshdns" \
      org.opencontainers.image.description="DNS stub resolver sidecar for workloads stretched over several Kubernetes clusters" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=builder /meshdns /meshdns
# distroless "nonroot" is uid/gid 65532; set numerically so runAsNonRoot can verify it.
USER 65532:65532
# DNS on 127.0.0.1:53 (MESHDNS_LISTEN) over UDP and TCP; /metrics, /livez, /readyz on 9153.
# Binding 53 as non-root needs net.ipv4.ip_unprivileged_port_start<=53 in the pod (k8s/) or
# container (Docker sets it to 0 by default since 20.10).
EXPOSE 53/udp 53/tcp 9153
# No HEALTHCHECK: there is no shell or HTTP client in the image; Kubernetes probes
# /readyz and /livez (k8s/base/statefulset.yaml).
ENTRYPOINT ["/meshdns"]
