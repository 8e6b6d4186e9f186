# syntax=docker/dockerfile:1
# The cloudcore image: the binary (crate cloudcore-server, modules/server/) on a small Debian runtime.
#   docker build -t cloudcore:latest .
# The same image runs the iptables-manager DaemonSet (`cloudcore iptables-manager`), which is
# why iptables is installed; cloudcore itself only calls it in modules.iptablesManager.mode
# internal, which also needs NET_ADMIN and the host's network namespace.

ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-bookworm AS build
# The build context has no .git: pass the commit for `cloudcore --version` and
# cloudcore_build_info, e.g. --build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD).
ARG GIT_COMMIT=unknown
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build outputs between builds; the binary is copied out
# because the target folder stays in the cache.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CLOUDCORE_GIT_COMMIT=${GIT_COMMIT} cargo build --release --locked -p cloudcore-server --bin cloudcore \
 && cp target/release/cloudcore /cloudcore

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /cloudcore /usr/local/bin/cloudcore
# An unprivileged user for cloudcore (the Deployment also sets runAsNonRoot); the
# iptables-manager DaemonSet overrides it with root plus NET_ADMIN and NET_RAW only.
USER 65532:65532
EXPOSE 10000 10002 10003 10004 9091
ENTRYPOINT ["/usr/local/bin/cloudcore"]
