# syntax=docker/dockerfile:1

# The images of function-controlplane (the default target) and of
# controlplane-provider (`--target provider`): one build, two entrypoints.
#
# Both stages must run the same Debian (12) and the same Python (3.11): the
# venv built here is copied as it is, its bin/python is a symlink to the
# interpreter that made it, its scripts' shebangs point at that python, and the
# binary wheels pip picks (grpcio, protobuf) are for that Python's ABI and that
# glibc. The distroless runtime has Debian's /usr/bin/python3 (3.11.2) and
# nothing in /usr/local, so the build stage uses Debian's python3 too, not the
# python:3.11 image (whose interpreter is /usr/local/bin/python3).

FROM debian:12-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN /usr/bin/python3 -m venv /venv
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore lets in only what the build needs (pyproject.toml, README.md and
# the Python packages).
COPY . .
RUN /venv/bin/pip install . \
 && /venv/bin/python -c 'import function.cli'

FROM gcr.io/distroless/python3-debian12:nonroot AS runtime
COPY --from=build /venv /venv
ENV PYTHONUNBUFFERED=1
# Numeric, so that a pod's runAsNonRoot can check it; 65532 is distroless's nonroot.
USER 65532:65532

FROM runtime AS provider
EXPOSE 8080
ENTRYPOINT ["/venv/bin/controlplane-provider"]

FROM runtime AS function
EXPOSE 9443
ENTRYPOINT ["/venv/bin/function-controlplane", "serve"]
