# meshdns container image: a static (musl) binary on distroless/static, running as uid 65532.
#
#   docker build -t meshdns:dev .        # or: podman build -t meshdns:dev .  /  buildah bud -t meshdns:dev .
#
# A plain Dockerfile: no BuildKit-only syntax, no tools fetched from outside the two base images
# and crates.io, and fully qualified image names (podman and buildah refuse short names unless a
# search registry is configured). It builds for the architecture it runs on: `docker buildx
# build --platform linux/amd64,linux/arm64` (.github/workflows/release.yml) runs this same file
# once per platform.
#
# Without Docker or a registry, image/build.sh builds the same kind of image offline from a
# local static build (and smoke-runs it); README, "Container image", compares the two.
#
# Layers, in order of what a change invalidates:
#   1. the Rust image with musl-tools and the musl target (changes with RUST_VERSION);
#   2. the dependencies, compiled against stub sources: rebuilt only when Cargo.toml or
#      Cargo.lock change;
#   3. the crate itself.
# The release profile (LTO fat, 1 codegen unit, panic=abort, strip) comes from Cargo.toml.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS builder
# musl-tools: musl-gcc, for any C code a build script compiles (e.g. ring). Build stage only, so
# the versions are the distribution's current ones rather than pins. The Rust target follows the
# machine the stage runs on: x86_64 or aarch64, unknown-linux-musl.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && echo "$(uname -m)-unknown-linux-musl" > /rust-target \
 && rustup target add "$(cat /rust-target)"
WORKDIR /build

# 2. Dependencies only: the manifests with stub sources. The stubs' own outputs are removed
# afterwards, so the real sources below are always compiled (their timestamps may be older).
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked --target "$(cat /rust-target)" \
 && rm -rf src "target/$(cat /rust-target)/release/.fingerprint/meshdns-"* \
           "target/$(cat /rust-target)/release/deps/meshdns-"* \
           "target/$(cat /rust-target)/release/deps/libmeshdns-"* \
           "target/$(cat /rust-target)/release/meshdns"

# 3. The crate. The whole (trimmed, see .dockerignore) context: Cargo.toml may name bench, test
# or example targets whose files must exist for the manifest to load.
COPY . .
RUN cargo build --release --locked --target "$(cat /rust-target)" --bin meshdns \
 && cp "target/$(cat /rust-target)/release/meshdns" /meshdns \
 && /meshdns --version

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="meshdns" \
      org.opencontainers.image.description="DNS stub resolver sidecar for workloads stretched over several Kubernetes clusters" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=builder /meshdns /meshdns
# distroless "nonroot" is uid/gid 65532; set numerically so runAsNonRoot can verify it.
USER 65532:65532
# DNS on 127.0.0.1:53 (MESHDNS_LISTEN) over UDP and TCP; /metrics, /livez, /readyz on 9153;
# DNS over TLS on 853 (MESHDNS_DOT_LISTEN, the resolver) and the webhook on 8443 (meshdns webhook).
# Binding 53 as non-root needs net.ipv4.ip_unprivileged_port_start<=53 in the pod (k8s/) or
# container (Docker sets it to 0 by default since 20.10).
EXPOSE 53/udp 53/tcp 853/tcp 8443/tcp 9153
# No HEALTHCHECK: there is no shell or HTTP client in the image; Kubernetes probes
# /readyz and /livez (k8s/components/sidecar/sidecar.yaml).
ENTRYPOINT ["/meshdns"]
