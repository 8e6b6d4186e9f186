# syntax=docker/dockerfile:1
# Two images of one binary (crate cloudcore-server, modules/server/) on a small Debian runtime:
#   docker build --target cloudcore -t cloudcore:latest .
#   docker build --target iptables-manager -t cloudcore-iptables-manager:latest .
# cloudcore's image has no iptables: only the iptables-manager DaemonSet
# (`cloudcore iptables-manager`, root with NET_ADMIN on the API server hosts) needs it, and
# modules.iptablesManager.mode internal (cloudcore keeping the rules itself) runs on the second
# image too.
#
# Base images: pin them by digest for reproducible, tamper-evident builds, e.g.
#   docker build --build-arg BUILD_IMAGE=rust:1.95-bookworm@sha256:<digest> \
#                --build-arg RUNTIME_IMAGE=debian:bookworm-slim@sha256:<digest> ...
# (the digest of a tag: `docker buildx imagetools inspect debian:bookworm-slim`). The defaults
# below are tags, not digests: no container registry was reachable where this file was written,
# so no digest could be looked up or verified (docs/security.md, "Residual risks").

ARG BUILD_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
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

FROM ${RUNTIME_IMAGE} AS iptables-manager
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /cloudcore /usr/local/bin/cloudcore
# The DaemonSet runs it as root with NET_ADMIN and NET_RAW only.
ENTRYPOINT ["/usr/local/bin/cloudcore"]
CMD ["iptables-manager"]

# Last, so a plain `docker build .` makes cloudcore's image.
FROM ${RUNTIME_IMAGE} AS cloudcore
COPY --from=build /cloudcore /usr/local/bin/cloudcore
# An unprivileged user (the Deployment also sets runAsNonRoot).
USER 65532:65532
EXPOSE 10000 10002 10003 10004 9091
ENTRYPOINT ["/usr/local/bin/cloudcore"]
