"""The whole platform on one machine, wired once for the system tests and `controlplane-sandbox`.

One etcd holds every cluster, each a kube-apiserver under its own prefix:

- the management cluster: Crossplane core (package runtime External, played
  by `PackageRuntime`), kube-controller-manager (garbage collector, namespace
  controller), Flux's source- and kustomize-controller, our function (mTLS),
  provider and backup controller (from the venv or, run as they ship, from
  the built images: the `launcher`); our packages are built with `crossplane
  xpkg build`, pushed to a loopback registry and installed under their
  production names through an ImageConfig; then the XRDs and compositions,
  as docs/install.md tells a platform team;
- the Space: the upstream Spaces CRDs, with `SpacesSimulator` playing the
  Spaces controller, slow as a Space is (`provisioning_delay`,
  `deletion_delay`), and `SpaceFront` as its ingress: one TLS address that
  serves the Space's own API at its root (the operator's Space kubeconfig,
  a static bearer token) and each hosted control plane under its path
  prefix (the connection secrets the Space writes), as an Upbound Space's
  `spaces-router` does (see `sandbox.spacefront`);
- one hosted control plane (API server) per Space ControlPlane, started when
  the simulator first sees it, with Crossplane core inside if the platform
  was started with `crossplane_in_hosted` or a scenario asks for it
  (`crossplane_in`);
- SeaweedFS (S3), moto (IAM, STS) and the provider-aws stand-in
  (`sandbox.aws`); the management cluster's API server issues ServiceAccount
  tokens as the EKS OIDC provider the shipped compositions' `irsa` trust
  names, and the backup controller gets the IRSA token EKS would project for
  it (`sandbox.eks`): both controllers run with the flags and environment
  deploy/ ships (`sandbox.shipped`), and write and read backups through the
  team roles' web identity trust, as on EKS.

Git repositories are served over smart HTTP on loopback. `Platform` is a
context manager: leaving it stops everything, newest first.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from sandbox import eks, kubectl, shipped
from sandbox.apiserver import APIServer, APIServerFactory, run_etcd
from sandbox.aws import Aws
from sandbox.controller_manager import ControllerManager
from sandbox.crossplane import (
    NAMESPACE,
    CrossplaneCore,
    PackageRuntime,
    condition_true,
    package_healthy,
)
from sandbox.flux import Flux
from sandbox.git import GitServer
from sandbox.hosted import HostedControlPlane
from sandbox.launcher import Launcher, VirtualenvLauncher
from sandbox.ours import Controller, FunctionServer
from sandbox.paths import REPO_ROOT, UPSTREAM_CRDS
from sandbox.pki import issue
from sandbox.processes import Process
from sandbox.registry import FUNCTION, PROVIDER, Registry
from sandbox.spacefront import SpaceFront
from sandbox.spaces import SPACES_CRD, Kube, SpacesSimulator, wait_for

SPACE_GROUP = "default"
SPACE_SECRET = "space-kubeconfig"
BACKUP_CRDS = REPO_ROOT / "deploy" / "backup-controller" / "crds"
INSTALL_DEADLINE = 180.0
# How long the sandbox's Space takes to provision and to delete a control plane:
# seconds, so every scenario meets a Space that is not instant (a real one takes minutes).
PROVISIONING_DELAY = 3.0
DELETION_DELAY = 3.0


COMPOSITIONS = (
    *sorted((REPO_ROOT / "compositions").glob("*.yaml")),
    *sorted((REPO_ROOT / "compositions" / "legacy").glob("*.yaml")),
)
SHIPPED_COMPOSITION = REPO_ROOT / "compositions" / "controlplane.yaml"


def sandbox_composition(path: Path, git_host: str) -> dict[str, Any]:
    """A repository composition with its Input as shipped but for the git hosts it allows.

    Git repositories are served on loopback over plain http, which the Input
    refuses unless it lists the host and allows http: it lists exactly the
    sandbox's git server (`host:port`), and nothing else private. Everything
    else, the backups' `irsa` trust included, is as shipped.
    """
    composition: dict[str, Any] = yaml.safe_load(path.read_text())
    for step in composition["spec"]["pipeline"]:
        function_input = step.get("input") or {}
        if function_input:
            function_input["source"] = {"allowedHosts": [git_host], "allowHTTP": True}
    return composition


@dataclass
class Platform:
    """Every process of the platform, started by `start` and stopped on exit.

    `crossplane_in_hosted` runs Crossplane core in every hosted control plane
    as it starts (the ControlPlane is Ready once core is); without it, core
    starts only in those a scenario asks for with `crossplane_in`. The Space
    reports either as the ControlPlane's `CrossplaneRunning` condition.
    `provisioning_delay` and `deletion_delay` are the Space's, in seconds.
    """

    workdir: Path
    launcher: Launcher = field(default_factory=VirtualenvLauncher)
    # Flags of the provider's in place of the shipped ones (`sandbox.shipped`).
    provider_args: tuple[str, ...] = ("--poll", "5s")
    crossplane_in_hosted: bool = False
    provisioning_delay: float = PROVISIONING_DELAY
    deletion_delay: float = DELETION_DELAY

    def __post_init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.processes: list[Process] = []
        self.hosted_control_planes: dict[str, HostedControlPlane] = {}
        # The simulator's thread adds hosted control planes while tests read them.
        self._hosted_lock = threading.Lock()

    def __enter__(self) -> Platform:
        try:
            self.start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self._stack.close()

    def _started(self, part: Any) -> Any:
        """Remember a started part so it is stopped on exit, and its process for logs."""
        self._stack.callback(part.stop)
        process = getattr(part, "process", None)
        if isinstance(process, Process):
            self.processes.append(process)
        return part

    def start(self) -> None:
        """Start and install everything; return once the packages and XRDs are ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        etcd = self._stack.enter_context(run_etcd(parent_dir=self.workdir))
        self.factory = self._stack.enter_context(APIServerFactory(etcd, parent_dir=self.workdir))
        # An EKS cluster's: the OIDC provider the shipped compositions' irsa trust names.
        self.management = self.factory(
            name="management", service_account_issuer=eks.issuer(SHIPPED_COMPOSITION)
        )
        self.kube = Kube(self.management)
        # A stable path to give a person (the server's own lives in a temporary folder).
        self.kubeconfig = self.workdir / "management.kubeconfig"
        self.kubeconfig.touch(mode=0o600)
        self.kubeconfig.write_text(self.management.kubeconfig)
        manager = ControllerManager(self.management, self.workdir)
        manager.start()
        self._started(manager)

        self.space = Kube(self.factory(name="space"))
        self.space.apply_crds(SPACES_CRD)
        self.space.namespace(SPACE_GROUP)
        self.front = self._stack.enter_context(SpaceFront())
        self.front.register_space(self.space.server)
        self.simulator = self._stack.enter_context(
            SpacesSimulator(
                self.space,
                self._hosted,
                provisioning_delay=self.provisioning_delay,
                deletion_delay=self.deletion_delay,
                front=self.front,
                crossplane_running=self.crossplane_running,
            )
        )

        self.core = CrossplaneCore(self.management, self.workdir / "crossplane")
        self.core.init()
        self.core.start()
        self._started(self.core)
        ca = self.core.root_ca
        self.function = FunctionServer(
            self.launcher, self.workdir, issue(ca, "function-controlplane"), ca.cert
        )
        self.function.start()
        self._started(self.function)
        self.package_runtime = self._stack.enter_context(
            PackageRuntime(
                self.kube, ca, self.function.certs, {FUNCTION.name: self.function.endpoint}
            )
        )
        self.registry = Registry(self.workdir / "registry")
        self.registry.start()
        self._started(self.registry)
        self._install_packages()

        self.flux = Flux(self.management, self.workdir / "flux")
        self.flux.install()
        self.flux.start()
        self._stack.callback(self.flux.stop)
        self.processes.extend(self.flux.processes)

        self._install_aws_crds()
        self.aws = self._stack.enter_context(Aws(self.workdir / "aws", self.kubeconfig))
        self._connect_provider()
        self._start_controllers()

        # Before the compositions: their Input allows this server's host.
        self.git = self._stack.enter_context(GitServer(self.workdir / "git"))
        self._install_api()

    def _start_controllers(self) -> None:
        """Our provider and backup controller, with the flags and environment deploy/ ships."""
        endpoints = self.aws.endpoints_environment()
        # The backup controller's ServiceAccount and the token EKS projects for it;
        # the provider restores irsa Backups with tokens of that account it mints.
        self.irsa = eks.ProjectedToken(self.kube, self.workdir / "irsa")
        self.irsa.start()
        self._stack.callback(self.irsa.stop)
        provider = shipped.provider()
        self.provider = Controller(
            self.launcher,
            self.workdir,
            "controlplane-provider",
            self.kubeconfig,
            list(provider.with_flags(self.provider_args)),
            env={**provider.env, **endpoints},
        )
        self.provider.start()
        self._started(self.provider)
        kubectl.apply(self.kubeconfig, BACKUP_CRDS)
        backup_controller = shipped.backup_controller()
        self.backup_controller = Controller(
            self.launcher,
            self.workdir,
            "controlplane-backup-controller",
            self.kubeconfig,
            list(backup_controller.args),
            env={**backup_controller.env, **endpoints, **self.irsa.environment()},
            files={eks.TOKEN_FILE_VARIABLE: self.irsa.path},
        )
        self.backup_controller.start()
        self._started(self.backup_controller)

    @property
    def hosted(self) -> dict[str, APIServer]:
        """The API server of each hosted control plane, by the Space ControlPlane's name."""
        with self._hosted_lock:
            return {name: plane.server for name, plane in self.hosted_control_planes.items()}

    def crossplane_in(self, name: str) -> HostedControlPlane:
        """The hosted control plane `name`, with Crossplane core running in it (started if not)."""
        with self._hosted_lock:
            plane = self.hosted_control_planes[name]
        plane.start_crossplane()
        # The Space reports it as the ControlPlane's CrossplaneRunning condition.
        self.simulator.refresh()
        return plane

    def rotate_space_ca(self) -> None:
        """The Space's front takes a new CA: every kubeconfig it wrote, the operator's too."""
        self.simulator.rotate_ca()
        self._write_space_kubeconfig()

    def crossplane_running(self, name: str) -> bool:
        """Whether Crossplane runs in the hosted control plane `name` (False if there is none)."""
        with self._hosted_lock:
            plane = self.hosted_control_planes.get(name)
        return plane is not None and plane.crossplane_running()

    def _hosted(self, name: str) -> APIServer:
        plane = HostedControlPlane(name, self.factory(name=name), self.workdir / "hosted" / name)
        self._stack.callback(plane.stop)
        with self._hosted_lock:
            self.hosted_control_planes[name] = plane
        if self.crossplane_in_hosted:
            self.crossplane_in(name)
        return plane.server

    def _manifest(self, name: str, *documents: dict[str, Any]) -> Path:
        path = self.workdir / "manifests" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        return path

    def _install_packages(self) -> None:
        """Push our packages and install them as a platform team does, under production names."""
        for package in (FUNCTION, PROVIDER):
            self.registry.push(package)
        packages = [
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": kind,
                "metadata": {"name": package.name},
                "spec": {"package": package.reference},
            }
            for kind, package in (("Function", FUNCTION), ("Provider", PROVIDER))
        ]
        kubectl.apply(
            self.kubeconfig,
            self._manifest("packages", self.registry.image_config(), *packages),
        )
        for plural, package in (("functions", FUNCTION), ("providers", PROVIDER)):
            wait_for(
                f"{plural} {package.name} Installed and Healthy",
                partial(package_healthy, self.kube, plural, package.name),
                timeout=INSTALL_DEADLINE,
            )

    def _install_aws_crds(self) -> None:
        """The provider-aws CRDs of the kinds the composition composes."""
        self.kube.apply_crds(UPSTREAM_CRDS / "provider-aws")

    def _connect_provider(self) -> None:
        """The Space's kubeconfig secret and the install guide's ClusterProviderConfig."""
        self._write_space_kubeconfig()
        kubectl.apply(
            self.kubeconfig, REPO_ROOT / "examples" / "provider" / "clusterproviderconfig.yaml"
        )

    def _write_space_kubeconfig(self) -> None:
        """The operator's Space kubeconfig: the front's root with the Space's token."""
        self.kube.put_secret(
            NAMESPACE, SPACE_SECRET, {"kubeconfig": self.front.space_kubeconfig().encode()}
        )

    def _install_api(self) -> None:
        """The XRDs and compositions; wait until the XRDs are Established and Offered."""
        xrds = (REPO_ROOT / "xrds", REPO_ROOT / "xrds" / "legacy")
        kubectl.apply(self.kubeconfig, *xrds, *self._compositions())
        for path in sorted(p for folder in xrds for p in folder.glob("*.yaml")):
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            wait_for(
                f"XRD {name} Established and Offered",
                partial(self._offered, name),
                timeout=INSTALL_DEADLINE,
            )

    def _offered(self, name: str) -> bool:
        """Established (and Offered, with a claim), and its CRDs serve lists."""
        xrd = self.kube.get(
            "compositeresourcedefinitions", None, name, "apiextensions.crossplane.io", "v2"
        )
        spec = (xrd or {}).get("spec") or {}
        if not condition_true(xrd, "Established"):
            return False
        crds = [f"{spec['names']['plural']}.{spec['group']}"]
        if "claimNames" in spec:
            if not condition_true(xrd, "Offered"):
                return False
            crds.append(f"{spec['claimNames']['plural']}.{spec['group']}")
        return all(self.kube.established(crd) for crd in crds)

    def _compositions(self) -> list[Path]:
        """The compositions with their Input allowing this git server."""
        return [
            self._manifest(f"composition-{path.stem}", sandbox_composition(path, self.git.host))
            for path in COMPOSITIONS
        ]

    def logs(self, lines: int = 40) -> str:
        """The tail of every process's log (and the in-process stand-in's), for a failure."""
        with self._hosted_lock:
            cores = [plane.core for plane in self.hosted_control_planes.values()]
        hosted = [core.process for core in cores if core is not None and core.process is not None]
        tails = [
            f"--- {process.name} ({process.log_path})\n{process.log_tail(lines)}"
            for process in (*self.processes, *hosted)
        ]
        standin = self.workdir / "aws" / "aws-standin.log"
        if standin.is_file():
            text = "\n".join(standin.read_text(errors="replace").splitlines()[-lines:])
            tails.append(f"--- aws stand-in ({standin})\n{text}")
        return "\n\n".join(tails)


@contextlib.contextmanager
def running(workdir: Path | None = None, **options: Any) -> Iterator[Platform]:
    """A started platform in `workdir` (a new temporary folder if None), stopped on exit."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sandbox-")))
        with Platform(workdir, **options) as platform:
            yield platform
