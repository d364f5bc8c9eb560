# syntax=docker/dockerfile:1

# The images of function-controlplane (the default target) and of
# controlplane-provider (`--target provider`; with the command
# /venv/bin/controlplane-backup-controller it is the Backup controller): one
# build, two entrypoints. `make images` (tools/images.sh) builds the same
# images without a container engine; tests/images/test_dockerfile.py keeps the
# two in agreement (entrypoints, user, working directory, ports, environment,
# labels, Debian 12 and its Python 3.11, /venv).
#
# Both stages must run the same Debian (12) and the same Python (3.11): the
# venv built here is copied as it is, its bin/python is a symlink to the
# interpreter that made it, its scripts' shebangs point at that python, and the
# binary wheels pip picks (grpcio, protobuf) are for that Python's ABI and that
# glibc. The distroless runtime has Debian's /usr/bin/python3 (3.11.2) and
# nothing in /usr/local, so the build stage uses Debian's python3 too, not the
# python:3.11 image (whose interpreter is /usr/local/bin/python3).

# The lock (tools/image-requirements.txt) hashes the x86_64 wheels: build for
# linux/amd64 (docker build --platform linux/amd64).
FROM debian:12-slim AS build
# Reproducible builds: pass --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct).
ARG SOURCE_DATE_EPOCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore lets in only what the build needs (pyproject.toml, README.md,
# the product's packages, the hashed lock and the venv recipe): no sandbox/.
COPY . .
# The recipe tools/images.sh runs too: the hashed lock, then the product, then
# pip and setuptools removed and .pyc files compiled with unchecked hashes.
RUN sh tools/venv.sh /src

FROM gcr.io/distroless/python3-debian12:nonroot AS runtime
COPY --from=build /venv /venv
# distroless sets the first two too; they are stated so that the two builds can be compared.
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt LANG=C.UTF-8 PYTHONUNBUFFERED=1
# Numeric, so that a pod's runAsNonRoot can check it; 65532 is distroless's nonroot.
USER 65532:65532
WORKDIR /home/nonroot
LABEL org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/acmeorg/controlplane" \
      org.opencontainers.image.vendor="Acme Platform Team"

FROM runtime AS provider
LABEL org.opencontainers.image.title="provider-controlplane"
EXPOSE 8080
ENTRYPOINT ["/venv/bin/controlplane-provider"]

FROM runtime AS function
LABEL org.opencontainers.image.title="function-controlplane"
EXPOSE 9443
ENTRYPOINT ["/venv/bin/function-controlplane", "serve"]
