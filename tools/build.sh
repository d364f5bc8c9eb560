#!/usr/bin/env bash
# Builds the Go tools the tests drive into .tools/bin, from the Go module proxy
# only, pinned by the go.mod of its tools folder (tools/go.mod for the
# crossplane CLI, Crossplane core and crane; tools/kube/go.mod for
# kube-apiserver, kube-controller-manager and kubectl; tools/etcd/go.mod for
# etcd; tools/flux/<controller>/go.mod for each Flux controller and
# tools/flux/cli/go.mod for the flux CLI;
# tools/controller-gen/go.mod for controller-gen; tools/sops/go.mod for sops
# and age-keygen; tools/plan-build/go.mod for controlplane-plan-build, our own
# program on Flux's libraries; tools/helm/go.mod for helm; tools/prometheus/go.mod for promtool and
# prometheus), and fetches the upstream
# CRDs the tests validate against into .tools/crds, pinned by version and sum
# in tools/crds.lock. A tool whose binary already reports the pinned version is
# not rebuilt, and CRDs whose stamp matches the lock are not fetched again, so
# this is cheap to call before every test run.
#
#   tools/build.sh                 build every tool and fetch the CRDs
#   tools/build.sh crossplane      build one (crossplane, crossplane_core,
#                                  crane, kube_apiserver, kube_controller_manager,
#                                  kubectl, etcd, source_controller,
#                                  kustomize_controller, flux_install (Flux's
#                                  install RBAC), controller_gen,
#                                  sops, age_keygen, plan_build, helm, flux_cli
#                                  (the bench's baseline; never by default),
#                                  promtool, prometheus (the rules' tests and
#                                  the sandbox's Prometheus) or
#                                  fetch the CRDs (crds)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/.tools/bin"
mkdir -p "${bin}"
export GOFLAGS="-mod=readonly"
export CGO_ENABLED=0

# The version a module has in the go.mod of a tools folder.
pinned() { # <tools-dir> <module>
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

# The version stamped into a Go binary for a module it was built from.
built() { # <binary> <module>
  [ -x "$1" ] || return 0
  go version -m "$1" 2>/dev/null | awk -v m="$2" '($1 == "dep" || $1 == "mod") && $2 == m {print $3}'
}

# Copies the YAML files of <subdir> of <module> (as pinned in <tools-dir>) from
# the module cache into .tools/<dest>, replacing what was there.
module_files() { # <tools-dir> <module> <subdir> <dest>
  local source; source="$(cd "$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")"
  rm -rf "${root}/.tools/$4"
  mkdir -p "${root}/.tools/$4"
  cp "${source}/$3/"*.yaml "${root}/.tools/$4/"
  chmod u+w "${root}/.tools/$4/"*.yaml
}

# Builds <package> of <module>, pinned by the go.mod in <tools-dir>, into
# .tools/bin/<binary> unless that binary already reports the pinned version.
# Extra arguments are ldflags; "%v" in them is replaced by the version.
build_pinned() { # <binary> <tools-dir> <module> <package> [ldflags...]
  local binary="$1" dir="$2" module="$3" package="$4"
  shift 4
  local want; want="$(pinned "${dir}" "${module}")"
  if [ "$(built "${bin}/${binary}" "${module}")" = "${want}" ]; then
    echo "${binary} ${want}: cached"
    return
  fi
  echo "${binary} ${want}: building"
  local ldflags="-s -w" flag
  for flag in "$@"; do ldflags+=" ${flag//%v/${want}}"; done
  (cd "${dir}" && go build -trimpath -tags "${GO_BUILD_TAGS-}" -ldflags "${ldflags}" \
    -o "${bin}/${binary}" "${package}")
}

# The crossplane CLI and Crossplane core, stamped with their release so package
# dependency constraints (crossplane.version) match.
crossplane_module="github.com/crossplane/crossplane/v2"
build_crossplane() {
  build_pinned crossplane "${root}/tools" "${crossplane_module}" \
    "${crossplane_module}/cmd/crank" "-X ${crossplane_module}/internal/version.version=%v"
}
# Core installs its own CRDs and webhook configurations from files (core init
# reads CRDS_PATH and WEBHOOK_CONFIGS_PATH): copied beside it from the module.
build_crossplane_core() {
  build_pinned crossplane-core "${root}/tools" "${crossplane_module}" \
    "${crossplane_module}/cmd/crossplane" "-X ${crossplane_module}/internal/version.version=%v"
  module_files "${root}/tools" "${crossplane_module}" cluster/crds crossplane-core/crds
  module_files "${root}/tools" "${crossplane_module}" cluster/webhookconfigurations \
    crossplane-core/webhookconfigurations
}

# crane serves the loopback OCI registry the packages are pushed to.
build_crane() {
  local module="github.com/google/go-containerregistry"
  build_pinned crane "${root}/tools" "${module}" "${module}/cmd/crane"
}

# The Flux controllers, one tools folder each: their dependency graphs differ.
# Each one's CRDs (all six source kinds; the Kustomization) are copied beside it.
build_source_controller() {
  local module="github.com/fluxcd/source-controller" dir="${root}/tools/flux/source-controller"
  build_pinned source-controller "${dir}" "${module}" "${module}"
  module_files "${dir}" "${module}" config/crd/bases flux/source-controller/crds
}
build_kustomize_controller() {
  local module="github.com/fluxcd/kustomize-controller" dir="${root}/tools/flux/kustomize-controller"
  build_pinned kustomize-controller "${dir}" "${module}" "${module}"
  module_files "${dir}" "${module}" config/crd/bases flux/kustomize-controller/crds
}

# Flux's own install RBAC, from flux2's manifests at the release tools/flux/cli
# pins (the module carries manifests/rbac and each controller's base): the
# ClusterRoles and bindings `flux install` applies and the ServiceAccounts of
# source-controller and kustomize-controller, into .tools/flux/install. The
# sandbox runs both controllers as those accounts (sandbox/flux.py).
build_flux_install() {
  local module="github.com/fluxcd/flux2/v2" dir="${root}/tools/flux/cli" out="${root}/.tools/flux/install"
  local want; want="$(pinned "${dir}" "${module}")"
  if [ -f "${out}/VERSION" ] && [ "$(cat "${out}/VERSION")" = "${want}" ]; then
    echo "flux install RBAC ${want}: cached"
    return
  fi
  echo "flux install RBAC ${want}: copying"
  local source; source="$(cd "${dir}" && go mod download "${module}" && go list -m -f '{{.Dir}}' "${module}")"
  rm -rf "${out}"
  mkdir -p "${out}"
  local file controller
  for file in controller reconciler edit view; do
    cp "${source}/manifests/rbac/${file}.yaml" "${out}/rbac-${file}.yaml"
  done
  for controller in source-controller kustomize-controller; do
    cp "${source}/manifests/bases/${controller}/account.yaml" "${out}/${controller}-account.yaml"
  done
  chmod u+w "${out}/"*.yaml
  echo "${want}" >"${out}/VERSION"
}

# A command of k8s.io/kubernetes (kube-apiserver, kubectl), pinned by tools/kube.
build_kubernetes() { # <command>
  local command="$1" dir="${root}/tools/kube" module="k8s.io/kubernetes"
  local want; want="$(pinned "${dir}" "${module}")"
  if [ "$(built "${bin}/${command}" "${module}")" = "${want}" ]; then
    echo "${command} ${want}: cached"
    return
  fi
  echo "${command} ${want}: building"
  # The version variables Kubernetes' own build stamps (hack/lib/version.sh),
  # so --version and /version report the release. The module proxy does not
  # say which commit a tag is: pass KUBE_GIT_COMMIT to stamp it. The build date
  # is the tag's time as the proxy reports it, so rebuilds are reproducible.
  local major minor date
  major="${want#v}"; major="${major%%.*}"
  minor="${want#v*.}"; minor="${minor%%.*}"
  [ "${want}" = "${want%%-*}" ] || minor+="+"
  date="$(cd "${dir}" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' "${module}")" ||
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  local ldflags="-s -w" pkg key val
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for key in gitVersion="${want}" gitMajor="${major}" gitMinor="${minor}" \
      gitCommit="${KUBE_GIT_COMMIT-}" gitTreeState=clean buildDate="${date}"; do
      val="${key#*=}"; key="${key%%=*}"
      ldflags+=" -X '${pkg}.${key}=${val}'"
    done
  done
  (cd "${dir}" && go build -trimpath -ldflags "${ldflags}" \
    -o "${bin}/${command}" "${module}/cmd/${command}")
}

build_kube_apiserver() { build_kubernetes kube-apiserver; }
build_kube_controller_manager() { build_kubernetes kube-controller-manager; }
build_kubectl() { build_kubernetes kubectl; }

build_etcd() {
  local dir="${root}/tools/etcd" module="go.etcd.io/etcd/server/v3"
  local want; want="$(pinned "${dir}" "${module}")"
  if [ "$(built "${bin}/etcd" "${module}")" = "${want}" ]; then
    echo "etcd ${want}: cached"
    return
  fi
  echo "etcd ${want}: building"
  # etcd's version is a constant of go.etcd.io/etcd/api/v3/version, pinned with
  # the server; its main package is the server module's root.
  (cd "${dir}" && go build -trimpath -ldflags "-s -w" \
    -o "${bin}/etcd" "${module}")
}

# sops and age-keygen encrypt the SOPS fixtures of the system tests, as a team
# does for its control plane. sops' root package imports every key service
# (AWS, GCP and Azure KMS, Vault, PGP), so a program of our own on its packages
# would build no less than the CLI: the CLI it is, at the release
# kustomize-controller decrypts with.
build_sops() {
  local module="github.com/getsops/sops/v3"
  build_pinned sops "${root}/tools/sops" "${module}" "${module}/cmd/sops"
}
build_age_keygen() {
  local module="filippo.io/age"
  build_pinned age-keygen "${root}/tools/sops" "${module}" "${module}/cmd/age-keygen"
}

# helm renders Crossplane core's own Helm chart, as `helm install` would, for the
# sandbox (sandbox/chart.py): the chart is copied from the crossplane module
# tools/go.mod pins (cluster/charts/crossplane) into .tools/crossplane-core/chart.
build_helm() {
  local module="helm.sh/helm/v4"
  build_pinned helm "${root}/tools/helm" "${module}" "${module}/cmd/helm" \
    "-X ${module}/internal/version.version=%v"
  local source chart="${root}/.tools/crossplane-core/chart"
  source="$(cd "${root}/tools" && go mod download "${crossplane_module}" &&
    go list -m -f '{{.Dir}}' "${crossplane_module}")"
  rm -rf "${chart}"
  mkdir -p "$(dirname "${chart}")"
  cp -R "${source}/cluster/charts/crossplane" "${chart}"
  chmod -R u+w "${chart}"
  # The module's chart says 0.0.1: Crossplane's release packages it with the
  # release as its version and appVersion (the image tag), as this does.
  local version; version="$(pinned "${root}/tools" "${crossplane_module}")"
  sed -i -e "s/^version: .*/version: ${version#v}/" -e "s/^appVersion: .*/appVersion: ${version#v}/" \
    "${chart}/Chart.yaml"
}

# The flux CLI: the baseline of bench/plan_scale.py (`flux diff kustomization`);
# built on demand only (`tools/build.sh flux_cli`), never by default. Its
# module embeds the install manifests flux2's Makefile generates, which the
# module proxy does not carry: it is built in a copy of the module, pinned by
# the module's own go.sum, with one empty manifest in their place (`flux diff`
# never reads them; `flux install` from this build would install nothing).
build_flux_cli() {
  local module="github.com/fluxcd/flux2/v2" dir="${root}/tools/flux/cli"
  local want; want="$(pinned "${dir}" "${module}")"
  # Built inside its own module, the binary records no module version: it reports it.
  if [ -x "${bin}/flux" ] && [ "$("${bin}/flux" --version 2>/dev/null)" = "flux version ${want#v}" ]; then
    echo "flux ${want}: cached"
    return
  fi
  echo "flux ${want}: building"
  local source work
  source="$(cd "${dir}" && go mod download "${module}" && go list -m -f '{{.Dir}}' "${module}")"
  work="$(mktemp -d)"
  cp -R "${source}/." "${work}"
  chmod -R u+w "${work}"
  mkdir -p "${work}/cmd/flux/manifests"
  printf '# generated by flux2 make manifests; not carried by the module proxy\n' \
    >"${work}/cmd/flux/manifests/placeholder.yaml"
  (cd "${work}" && go build -trimpath -ldflags "-s -w -X main.VERSION=${want#v}" \
    -o "${bin}/flux" ./cmd/flux)
  rm -rf "${work}"
}

# controlplane-plan-build: a stage built as kustomize-controller builds it, for
# `controlplane-plan`. Our own source (tools/plan-build/main.go), so it is
# stamped with the fluxcd/pkg/kustomize it is built on and rebuilt when that
# pin or the source changes (the source's hash is stamped too).
build_plan_build() {
  local dir="${root}/tools/plan-build" module="github.com/fluxcd/pkg/kustomize"
  local want; want="$(pinned "${dir}" "${module}") $(cat "${dir}/go.mod" "${dir}/go.sum" "${dir}"/*.go | sha256sum | cut -c1-16)"
  local out="${PLAN_BUILD_OUT:-${bin}}/controlplane-plan-build"
  if [ -x "${out}" ] && [ "$("${out}" --version 2>/dev/null)" = "${want}" ]; then
    echo "controlplane-plan-build ${want}: cached"
    return
  fi
  echo "controlplane-plan-build ${want}: building"
  (cd "${dir}" && go build -trimpath -ldflags "-s -w -X 'main.version=${want}'" -o "${out}" .)
}

# promtool and the Prometheus server, pinned by tools/prometheus/go.mod (the
# github.com/prometheus/prometheus module, v0.3MM.P for release 3.MM.P), for
# the monitoring tests and the platform's Prometheus. remove_all_sd drops
# every service discovery plugin: we scrape static targets, and the cloud
# SDKs those plugins import are most of the server's build. The version is
# stamped as Prometheus' own build does (prometheus/common/version), so
# `--version` and /api/v1/status/buildinfo report the release.
build_prometheus_command() { # <command>
  local command="$1" dir="${root}/tools/prometheus" module="github.com/prometheus/prometheus"
  local want release
  want="$(pinned "${dir}" "${module}")"
  release="${want#v0.}"                                             # 316.0
  release="${release:0:1}.$((10#${release:1:2})).${release#*.}"     # 3.16.0
  GO_BUILD_TAGS=remove_all_sd build_pinned "${command}" "${dir}" "${module}" "${module}/cmd/${command}" \
    "-X github.com/prometheus/common/version.Version=${release}" \
    "-X github.com/prometheus/common/version.Branch=release" \
    "-X github.com/prometheus/common/version.Revision=%v"
}
build_promtool() { build_prometheus_command promtool; }
build_prometheus() { build_prometheus_command prometheus; }

# controller-gen generates the Spaces CRDs (build_crds).
build_controller_gen() {
  local module="sigs.k8s.io/controller-tools"
  build_pinned controller-gen "${root}/tools/controller-gen" "${module}" \
    "${module}/cmd/controller-gen"
}

# Downloads one module at an exact version through the module proxy (which
# refuses version listings for some of these, so nothing here resolves a
# query), checks its h1: sum against the one tools/crds.lock records, and
# prints its folder in the module cache.
fetch_module() { # <module> <version> <h1 sum>
  local json dir sum
  if ! json="$(cd "${crds_work}" && GOFLAGS=-mod=mod go mod download -json "$1@$2")"; then
    echo "crds: cannot download $1@$2: ${json}" >&2
    return 1
  fi
  dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"${json}")"
  sum="$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",*$/\1/p' <<<"${json}")"
  if [ "${sum}" != "$3" ]; then
    echo "crds: $1@$2 has sum ${sum}; tools/crds.lock records $3" >&2
    return 1
  fi
  echo "${dir}"
}

# Runs controller-gen over packages of a module and prints the folder it wrote
# the CRDs to. The module cache is read-only, so it runs in a copy; the
# module's own go.sum pins what its types import.
generate_crds() { # <module folder> <packages> <output folder>
  local src; src="$(mktemp -d "${crds_work}/src.XXXXXX")"
  cp -R "$1/." "${src}"
  chmod -R u+w "${src}"
  (cd "${src}" && GOFLAGS=-mod=readonly "${bin}/controller-gen" crd paths="$2" output:crd:dir="$3")
}

# The upstream CRDs the tests validate against, into .tools/crds with one
# folder per upstream (flux, crossplane, provider-aws, spaces), as
# tools/crds.lock says. The stamp records the lock, this function and
# controller-gen's version, then every file's sha256: when all of them still
# hold, nothing is fetched. A new set is staged beside the old one and swapped
# in whole, so a reader never sees half of one.
build_crds() {
  local lock="${root}/tools/crds.lock" out="${root}/.tools/crds"
  local want
  want="lock $(sha256sum <"${lock}" | cut -c1-64)"
  want+=" script $(declare -f build_crds fetch_module generate_crds | sha256sum | cut -c1-64)"
  want+=" controller-gen $(pinned "${root}/tools/controller-gen" sigs.k8s.io/controller-tools)"
  if [ -f "${out}/.stamp" ] && [ "$(head -1 "${out}/.stamp")" = "${want}" ] &&
    (cd "${out}" && tail -n +2 .stamp | sha256sum --check --quiet --strict >/dev/null 2>&1); then
    echo "crds: cached"
    return
  fi
  echo "crds: fetching"
  crds_work="$(mktemp -d)"
  crds_staging="${out}.new.$$"
  trap 'rm -rf "${crds_work}" "${crds_staging}"' EXIT
  mkdir -p "${crds_staging}"
  local -A module_dir=() generated=()
  local verb folder module arg sum
  while read -r verb folder module arg sum; do
    case "${verb}" in
      module) # folder is the module path here, module its version, arg its sum
        module_dir["${folder}"]="$(fetch_module "${folder}" "${module}" "${arg}")" ;;
      copy)
        mkdir -p "${crds_staging}/${folder}"
        cp "${module_dir[${module}]}/${arg}" "${crds_staging}/${folder}/"
        ;;
      generate)
        local key="${module} ${arg}"
        if [ -z "${generated[${key}]-}" ]; then
          [ ${#generated[@]} -gt 0 ] || build_controller_gen
          generated["${key}"]="$(mktemp -d "${crds_work}/gen.XXXXXX")"
          generate_crds "${module_dir[${module}]}" "${arg}" "${generated[${key}]}"
        fi
        mkdir -p "${crds_staging}/${folder}"
        cp "${generated[${key}]}/${sum}" "${crds_staging}/${folder}/"
        ;;
      '' | \#*) ;;
      *)
        echo "crds: tools/crds.lock: unknown line: ${verb} ${folder} ${module} ${arg} ${sum}" >&2
        return 1
        ;;
    esac
  done <"${lock}"
  chmod -R u+rw,go+r "${crds_staging}"
  (cd "${crds_staging}" && {
    echo "${want}"
    find . -type f -name '*.yaml' | LC_ALL=C sort | xargs sha256sum
  } >.stamp)
  if [ -e "${out}" ]; then
    mv "${out}" "${out}.old.$$"
  fi
  mv -T "${crds_staging}" "${out}"
  rm -rf "${out}.old.$$" "${crds_work}"
  trap - EXIT
  echo "crds: $(grep -c '\.yaml$' "${out}/.stamp") files in ${out}"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(crossplane crossplane_core crane kube_apiserver
  kube_controller_manager kubectl etcd source_controller kustomize_controller flux_install sops age_keygen
  plan_build helm promtool prometheus crds)
for target in "${targets[@]}"; do
  "build_${target}"
done
