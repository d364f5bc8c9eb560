#!/usr/bin/env bash
# Builds the OCI images of the function and the provider without a container
# engine, from Debian packages and PyPI only, reproducibly: with the same
# SOURCE_DATE_EPOCH (default: the time of the last commit), the same tree, lock
# and Debian archive, two builds give the same digests.
#
#   tools/images.sh            build the images (skipped when nothing they are made of changed)
#   tools/images.sh --force    build them even so
#   tools/images.sh release    the images, then dist/: xpkgs (the function and provider
#                              with their runtime, the Configuration), image tarballs,
#                              SBOMs, controlplane-plan for teams' CI (the project's
#                              wheel and controlplane-plan-build) and SHA256SUMS
#   tools/images.sh lock       re-resolve tools/image-requirements.txt from pyproject.toml
#   tools/images.sh fingerprint  the hash of everything the images are made of
#
# Run as root (mmdebstrap's root mode, chroot, ownership kept when unpacking).
# Writes IMAGES_DIR (default .build/images): oci/ (an OCI layout with the tags
# `function` and `provider`), rootfs/ (their one layer, unpacked), <image>/ (an
# OCI runtime bundle: config.json and a link to rootfs/, what sandbox.rootfs
# runs) and digests. Debian packages and wheels are cached in IMAGES_CACHE
# (default .cache/images). `release` also writes DIST_DIR (default dist/).
#
# The build stage is `mmdebstrap --variant=minbase` with python3 and
# python3-venv, where tools/venv.sh (the Dockerfile's recipe too) makes /venv.
# The runtime stage is `mmdebstrap --variant=extract` of python3 and the
# libraries the wheels need, completed by tools/rootfs.py like distroless: no
# shell, no package manager, nonroot 65532. One layer holds it all; the two
# images differ only in their config.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${IMAGES_DIR:-${root}/.build/images}"
cache="${IMAGES_CACHE:-${root}/.cache/images}"
dist="${DIST_DIR:-${root}/dist}"
python="${PYTHON:-python3.11}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "${root}/pyproject.toml" | head -n 1)"
: "${SOURCE_DATE_EPOCH:=$(git -C "${root}" log -1 --format=%ct)}"
export SOURCE_DATE_EPOCH

suite=bookworm
mirrors=(
  "deb http://deb.debian.org/debian ${suite} main"
  "deb http://deb.debian.org/debian ${suite}-updates main"
  "deb http://deb.debian.org/debian-security ${suite}-security main"
)
runtime_packages=python3,libssl3,libstdc++6,tzdata,netbase,base-files
# What pip needs of the product: the .dockerignore allow-list (no sandbox/, no tests).
sources=(pyproject.toml README.md function provider tools/image-requirements.txt tools/venv.sh)
images=(function provider)

log() { printf '%s images: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# Debian's tools, installed with apt on a fresh machine (CI runs as root).
require_tools() {
  local missing=()
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v umoci >/dev/null || missing+=(umoci)
  command -v skopeo >/dev/null || missing+=(skopeo)
  command -v unshare >/dev/null || missing+=(util-linux)
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]} with apt"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
}

# mmdebstrap with the .deb files cached between builds (and the same mirrors each time).
debootstrap() { # <variant> <packages> <target> [hook options...]
  local variant="$1" packages="$2" target="$3"
  shift 3
  mkdir -p "${cache}/debs"
  mmdebstrap --quiet --mode=root --format=directory --variant="${variant}" \
    --include="${packages}" --skip=essential/unlink --dpkgopt=force-unsafe-io \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in ${cache}/debs /var/cache/apt/archives/" \
    "$@" \
    --customize-hook="sync-out /var/cache/apt/archives ${cache}/debs" \
    "${suite}" "${target}" "${mirrors[@]}"
}

# The locked wheels, downloaded (and checked against their hashes) by this
# machine's pip with its own index and CA settings: the build stage installs
# them offline, so nothing of the build machine's network set-up enters it.
download_wheels() {
  mkdir -p "${cache}/wheels"
  "${python}" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary=:all: --dest "${cache}/wheels" -r "${root}/tools/image-requirements.txt"
}

# Run a command in a root filesystem with /proc, /dev and the wheels mounted
# (in a mount namespace of its own, so nothing stays mounted after).
in_build_root() { # <root> <command...>
  local target="$1"
  shift
  mkdir -p "${target}/wheels"
  unshare --mount --propagation private --fork -- sh -euc '
    target="$1"; wheels="$2"; shift 2
    mount -t proc proc "${target}/proc"
    mount --rbind /dev "${target}/dev"
    mount --bind -o ro "${wheels}" "${target}/wheels"
    exec chroot "${target}" env -i "$@"
  ' sh "${target}" "${cache}/wheels" PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH}" \
    PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels "$@"
}

# Every input of the images, hashed: the build is skipped when it is unchanged.
fingerprint() {
  (
    cd "${root}"
    echo "${SOURCE_DATE_EPOCH} ${suite} ${runtime_packages} ${mirrors[*]}"
    sha256sum tools/images.sh tools/rootfs.py
    find "${sources[@]}" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 |
      LC_ALL=C sort -z | xargs -0 sha256sum
  ) | sha256sum | cut -d' ' -f1
}

# The umoci config flags of an image, into the array `config`.
image_config() { # <image>
  config=(
    --created "$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)"
    --os linux --architecture amd64
    --config.user "65532:65532"
    --config.workingdir /home/nonroot
    --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    --config.env "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"
    --config.env "LANG=C.UTF-8"
    --config.env "PYTHONUNBUFFERED=1"
    --config.label "org.opencontainers.image.version=${version}"
    --config.label "org.opencontainers.image.revision=$(git -C "${root}" rev-parse HEAD)"
    --config.label "org.opencontainers.image.created=$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)"
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
    --config.label "org.opencontainers.image.source=https://github.com/acmeorg/controlplane"
    --config.label "org.opencontainers.image.vendor=Acme Platform Team"
  )
  case "$1" in
    function)
      config+=(
        --config.entrypoint /venv/bin/function-controlplane --config.entrypoint serve
        --config.exposedports 9443/tcp
        --config.label "org.opencontainers.image.title=function-controlplane"
        --config.label "org.opencontainers.image.description=The controlplane composition function (gRPC)"
      )
      ;;
    provider)
      config+=(
        --config.entrypoint /venv/bin/controlplane-provider
        --config.exposedports 8080/tcp
        --config.label "org.opencontainers.image.title=provider-controlplane"
        --config.label "org.opencontainers.image.description=The controlplane provider; with the command /venv/bin/controlplane-backup-controller, the Backup controller"
      )
      ;;
  esac
}

build() {
  require_tools
  local want
  want="$(fingerprint)"
  if [ "${1:-}" != --force ] && [ -f "${out}/fingerprint" ] &&
    [ "$(cat "${out}/fingerprint")" = "${want}" ]; then
    log "unchanged since the last build: $(tr '\n' ' ' <"${out}/digests")"
    return
  fi
  mkdir -p "${out}"
  rm -rf "${out:?}/work" "${out}/oci" "${out}/fingerprint" "${out}/digests" "${out}/rootfs"
  local work="${out}/work"
  mkdir -p "${work}"

  log "build stage: Debian ${suite} minbase with python3 and python3-venv"
  debootstrap minbase python3,python3-venv "${work}/build"
  mkdir -p "${work}/build/src"
  (cd "${root}" && tar --create --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' \
    "${sources[@]}") | tar --extract --directory "${work}/build/src"
  log "build stage: /venv from tools/image-requirements.txt"
  download_wheels
  in_build_root "${work}/build" sh /src/tools/venv.sh /src

  log "runtime stage: Debian ${suite} extract of ${runtime_packages}"
  debootstrap extract "${runtime_packages}" "${work}/rootfs" \
    --extract-hook="PYTHONPATH='${root}' ${python} -m tools.rootfs extract-hook \"\$1\""
  local built runs
  built="$(chroot "${work}/build" /usr/bin/python3 -c 'import platform; print(platform.python_version())')"
  runs="$(chroot "${work}/rootfs" /usr/bin/python3 -c 'import platform; print(platform.python_version())')"
  if [ "${built}" != "${runs}" ]; then
    echo "the build stage's Python ${built} is not the runtime's ${runs}: the Debian archive changed mid-build; build again" >&2
    exit 1
  fi
  cp -a "${work}/build/venv" "${work}/rootfs/venv"
  PYTHONPATH="${root}" "${python}" -m tools.rootfs finish "${work}/rootfs" "${SOURCE_DATE_EPOCH}"

  log "OCI images"
  umoci init --layout "${out}/oci"
  umoci new --image "${out}/oci:base"
  umoci unpack --image "${out}/oci:base" "${work}/bundle" >/dev/null
  rm -rf "${work}/bundle/rootfs"
  mv "${work}/rootfs" "${work}/bundle/rootfs"
  umoci repack --image "${out}/oci:base" "${work}/bundle" \
    --history.created "$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)" \
    --history.created_by "tools/images.sh: Debian ${suite} python3 and /venv (tools/venv.sh)"
  local image config
  for image in "${images[@]}"; do
    image_config "${image}"
    umoci config --image "${out}/oci:base" --tag "${image}" --no-history "${config[@]}"
  done
  umoci rm --image "${out}/oci:base"
  umoci gc --layout "${out}/oci"

  # Both images are the one layer: unpacked once (what the tests and
  # sandbox.rootfs run), with one OCI runtime config per image beside it.
  : >"${out}/digests.new"
  rm -rf "${out:?}/rootfs" "${out}/function" "${out}/provider"
  umoci unpack --image "${out}/oci:${images[0]}" "${work}/unpacked" >/dev/null
  mv "${work}/unpacked/rootfs" "${out}/rootfs"
  for image in "${images[@]}"; do
    mkdir -p "${out}/${image}"
    ln -s ../rootfs "${out}/${image}/rootfs"
    # From the bundle, so that the config's root is the relative path "rootfs".
    (cd "${out}/${image}" && umoci raw runtime-config --image "${out}/oci:${image}" \
      --rootfs rootfs config.json)
    echo "${image} $(skopeo inspect --format '{{.Digest}}' "oci:${out}/oci:${image}")" >>"${out}/digests.new"
  done
  mv "${out}/digests.new" "${out}/digests"
  rm -rf "${work}"
  echo "${want}" >"${out}/fingerprint"
  log "built: $(tr '\n' ' ' <"${out}/digests")"
}

release() {
  build "$@"
  local crossplane="${root}/.tools/bin/crossplane"
  [ -x "${crossplane}" ] || "${root}/tools/build.sh" crossplane
  rm -rf "${dist}"
  mkdir -p "${dist}"
  local image package digest
  for image in "${images[@]}"; do
    package="${image}-controlplane"
    [ "${image}" = function ] || package="provider-controlplane"
    digest="$(awk -v i="${image}" '$1 == i {print $2}' "${out}/digests")"
    # `xpkg build` takes a docker-archive (not an OCI layout) as the runtime to embed.
    rm -f "${out}/${image}.docker.tar"
    skopeo copy --quiet "oci:${out}/oci:${image}" \
      "docker-archive:${out}/${image}.docker.tar:acme/${package}:${version}"
    "${crossplane}" xpkg build --package-root "${root}/package/${image}" \
      --examples-root "${out}/no-examples" \
      --embed-runtime-image-tarball "${out}/${image}.docker.tar" \
      --package-file "${dist}/${package}.xpkg"
    PYTHONPATH="${root}" "${python}" -m tools.sbom "${out}/${image}/rootfs" \
      "acme/${package}" "${version}" "${digest}" >"${dist}/${package}.sbom.cdx.json"
  done
  # The Configuration: the XRDs and Compositions, depending on the two above
  # and on provider-aws (package/configuration/crossplane.yaml); no runtime.
  PYTHONPATH="${root}" "${python}" -m tools.packages configuration "${out}/configuration"
  "${crossplane}" xpkg build --package-root "${out}/configuration" \
    --examples-root "${out}/no-examples" \
    --package-file "${dist}/configuration-controlplane.xpkg"
  # Both images in one OCI layout (they share their one layer), tagged
  # function and provider, as a tar whose bytes depend on nothing but its files:
  # `skopeo copy oci-archive:...:function docker://...` pushes it digest for digest.
  tar --create --file "${dist}/controlplane-images.oci.tar" --directory "${out}/oci" \
    --sort=name --mtime="@${SOURCE_DATE_EPOCH}" --owner=0 --group=0 --numeric-owner \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime .
  # `controlplane-plan` for teams' CI: the project's wheel (its console script) and
  # the Go program it builds stages with, for linux/amd64 as the images are.
  "${root}/tools/build.sh" plan_build
  cp "${root}/.tools/bin/controlplane-plan-build" "${dist}/controlplane-plan-build-linux-amd64"
  "${python}" -m pip wheel --quiet --no-deps --wheel-dir "${dist}" "${root}"
  (cd "${dist}" && sha256sum -- * >SHA256SUMS)
  log "dist/: $(cd "${dist}" && ls | tr '\n' ' ')"
}

# tools/image-requirements.txt: pyproject.toml's dependencies and setuptools, resolved
# by this machine's Python 3.11 for its platform (the image's: x86_64, glibc 2.36).
lock() {
  local report
  report="$(mktemp)"
  "${python}" -m pip install --quiet --dry-run --ignore-installed --only-binary=:all: \
    --report "${report}" "${root}" "$(sed -n 's/^requires = \["\(setuptools[^"]*\)"\]$/\1/p' "${root}/pyproject.toml")"
  PYTHONPATH="${root}" "${python}" -m tools.lock "${report}" "${root}/tools/image-requirements.txt"
  rm -f "${report}"
}

case "${1:-}" in
  release) shift; release "$@" ;;
  lock) lock ;;
  fingerprint) fingerprint ;;
  "" | --force) build "$@" ;;
  *) echo "usage: tools/images.sh [--force | release [--force] | lock | fingerprint]" >&2; exit 2 ;;
esac
