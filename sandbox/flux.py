"""Flux's source-controller and kustomize-controller as processes, with their CRDs and RBAC.

Both read KUBECONFIG (they have no flag for it), listen on loopback ports of
their own, and need all six source CRDs and the Kustomization CRD installed,
or they exit or hang. source-controller serves artifacts from a folder on a
loopback address; kustomize-controller fetches them from there.

Each runs as the ServiceAccount Flux's own install gives it, with the
ClusterRoles and bindings of that install (flux2's manifests/rbac at the
release tools/flux/cli pins, copied by `tools/build.sh flux_install`): the
`crd-controller` role for both, and `cluster-reconciler`, which binds
kustomize-controller to cluster-admin as `flux install` does. What keeps a
team from applying with those rights is the multi-tenancy lockdown:
`REQUIRED_KUSTOMIZE_FLAGS` and deploy/tenancy's admission policy on
Kustomizations (docs/security.md).
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import identity, kubectl
from sandbox.apiserver import APIServer, free_port
from sandbox.identity import ServiceAccount
from sandbox.paths import TOOLS, TOOLS_BIN
from sandbox.processes import Process
from sandbox.spaces import Kube

SOURCE_CONTROLLER_BIN = TOOLS_BIN / "source-controller"
KUSTOMIZE_CONTROLLER_BIN = TOOLS_BIN / "kustomize-controller"
# Copied from the controllers' modules by tools/build.sh, beside the binaries.
CRD_FOLDERS = (
    TOOLS / "flux" / "source-controller" / "crds",
    TOOLS / "flux" / "kustomize-controller" / "crds",
)
# Flux's install RBAC and ServiceAccounts (tools/build.sh flux_install).
INSTALL_FOLDER = TOOLS / "flux" / "install"
NAMESPACE = "flux-system"
_LOOPBACK = "127.0.0.1"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(port: int) -> bool:
    try:
        with _NO_PROXY.open(f"http://{_LOOPBACK}:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


# What the platform requires of kustomize-controller (the Security model): no
# kustomization.yaml may fetch a remote base past source.allowedHosts, and no
# Kustomization may reach another namespace's source or Secrets.
REQUIRED_KUSTOMIZE_FLAGS = ("--no-remote-bases=true", "--no-cross-namespace-refs=true")


@dataclass
class _Controller:
    name: str
    binary: Path
    flags: list[str]
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: Process | None = None
    # A cgroup (its folder) the controller runs in from its first instruction.
    cgroup: Path | None = None

    @property
    def account(self) -> ServiceAccount:
        """The ServiceAccount Flux's install runs this controller as (named after it)."""
        return ServiceAccount(NAMESPACE, self.name)

    def start(self, server: APIServer, workdir: Path) -> None:
        if not self.binary.is_file():
            target = self.name.replace("-", "_")
            raise FileNotFoundError(f"{self.binary} is missing: run tools/build.sh {target}")
        argv = [
            str(self.binary),
            f"--metrics-addr={_LOOPBACK}:{self.metrics_port}",
            f"--health-addr={_LOOPBACK}:{self.health_port}",
            "--log-level=info",
            *self.flags,
        ]
        if self.cgroup is not None:
            # The shell joins the cgroup and execs the controller in its place, as a
            # container's runtime does: the limit holds the controller's pid itself.
            join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
            argv = ["/bin/sh", "-c", join, str(self.cgroup), *argv]
        path = workdir / "identities" / f"{self.name}.kubeconfig"
        self.process = Process(
            self.name,
            argv,
            workdir / f"{self.name}.log",
            env={
                "KUBECONFIG": str(identity.kubeconfig(server, self.account, path)),
                "RUNTIME_NAMESPACE": NAMESPACE,
            },
        )
        self.process.start(lambda: _healthy(self.health_port), timeout=120)


@dataclass
class Flux:
    """source-controller and kustomize-controller on one API server."""

    server: APIServer
    workdir: Path
    controllers: list[_Controller] = field(default_factory=list)
    # More kustomize-controller flags (--concurrent, --feature-gates), after the platform's.
    kustomize_flags: tuple[str, ...] = ()
    # A cgroup to run kustomize-controller in (a memory limit, as a pod's).
    kustomize_cgroup: Path | None = None

    def install(self) -> None:
        """Install the Flux CRDs, namespace, ServiceAccounts and RBAC, as Flux's install does."""
        kube = Kube(self.server)
        kube.apply_crds(*CRD_FOLDERS)
        kube.namespace(NAMESPACE)
        if not INSTALL_FOLDER.is_dir():
            raise FileNotFoundError(f"{INSTALL_FOLDER} is missing: run tools/build.sh flux_install")
        kubectl.kubectl(
            self.server.kubeconfig_path,
            *("apply", "--server-side", "--field-manager=sandbox"),
            *("--namespace", NAMESPACE, "-f", str(INSTALL_FOLDER)),
        )

    def start(self) -> None:
        """Start both controllers; wait until each one's /readyz answers."""
        storage = self.workdir / "artifacts"
        storage.mkdir(parents=True, exist_ok=True)
        storage_address = f"{_LOOPBACK}:{free_port()}"
        self.controllers = [
            _Controller(
                "source-controller",
                SOURCE_CONTROLLER_BIN,
                [
                    f"--storage-path={storage}",
                    f"--storage-addr={storage_address}",
                    f"--storage-adv-addr={storage_address}",
                ],
            ),
            # A stage waits for the stages it depends on by polling them every
            # --requeue-dependency (30 s by default): 5 s keeps a staged sync's
            # scenarios short without changing what they show.
            _Controller(
                "kustomize-controller",
                KUSTOMIZE_CONTROLLER_BIN,
                [*REQUIRED_KUSTOMIZE_FLAGS, "--requeue-dependency=5s", *self.kustomize_flags],
                cgroup=self.kustomize_cgroup,
            ),
        ]
        for controller in self.controllers:
            controller.start(self.server, self.workdir)

    @property
    def processes(self) -> list[Process]:
        """The running controllers' processes."""
        return [c.process for c in self.controllers if c.process is not None]

    @property
    def kustomize_controller(self) -> Process:
        """kustomize-controller's process, once started."""
        found = next(c.process for c in self.controllers if c.name == "kustomize-controller")
        if found is None:
            raise RuntimeError("kustomize-controller is not started")
        return found

    def stop(self) -> None:
        """Stop both controllers."""
        for process in reversed(self.processes):
            process.stop()
