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
  `deletion_delay`), and `SpaceFront` as its ingress (`spaces-router`) on an
  address of its own (`ROUTER_ADDRESS`, not the Space API server's), which
  serves the Space's own API at its root (the operator's Space kubeconfig,
  as `up ctx` writes it, a static bearer token) and each hosted control
  plane under its path prefix (the connection secrets the Space writes);
  the Space publishes that ingress in `upbound-system/ingress-public` (see
  `sandbox.spacefront`). `self_hosted_group` adds a group reached as the
  self-hosted docs say, with a ServiceAccount token of the host cluster's
  API server; `cloud_space` a second Space as Upbound Cloud runs them;
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

import base64
import contextlib
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from sandbox import eks, identity, install, kubectl, provideraws, shipped
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
from sandbox.identity import ServiceAccount
from sandbox.launcher import Launcher, VirtualenvLauncher
from sandbox.ours import Controller, FunctionServer
from sandbox.paths import REPO_ROOT
from sandbox.pki import issue
from sandbox.processes import Process
from sandbox.prometheus import Prometheus
from sandbox.provideraws import MEMBERS, dependency_name
from sandbox.registry import CONFIGURATION_NAME, FUNCTION, PROVIDER, Package, Registry
from sandbox.space_releases import DEFAULT_RELEASES
from sandbox.spacefront import CloudAuth, SpaceFront
from sandbox.spaces import (
    SPACES_CRD,
    Kube,
    SpacesSimulator,
    provider_role,
    service_account_kubeconfig,
    wait_for,
)

SPACE_GROUP = "default"
SPACE_SECRET = "space-kubeconfig"
BACKUP_CRDS = REPO_ROOT / "deploy" / "backup-controller" / "crds"
# The identity deploy/backup-controller/serviceaccount.yaml gives the Backup
# controller (the provider's is the one its runtime config names).
BACKUP_ACCOUNT = ServiceAccount("controlplane-system", "controlplane-backup")
INSTALL_DEADLINE = 180.0
# How long the sandbox's Space takes to provision and to delete a control plane:
# seconds, so every scenario meets a Space that is not instant (a real one takes minutes).
PROVISIONING_DELAY = 3.0
DELETION_DELAY = 3.0
# The Space's ingress (spaces-router) and a Cloud Space's, each on a loopback address
# of its own: a host other than the Space API server's 127.0.0.1, so the provider's
# default allowed host (what the Space publishes) is what admits them.
ROUTER_ADDRESS = "127.0.0.2"
CLOUD_ADDRESS = "127.0.0.3"
V2_COMPOSITION = REPO_ROOT / "compositions" / "controlplane.yaml"


XRD_FOLDERS = (REPO_ROOT / "xrds", REPO_ROOT / "xrds" / "legacy")
# A kind of each package's, which its ServiceAccount may watch once the RBAC
# manager has bound the package's roles (by API group).
WATCHED = {
    "controlplane.spaces.upbound.io": "instances",
    "s3.aws.m.upbound.io": "buckets",
    "iam.aws.m.upbound.io": "roles",
}
COMPOSITIONS = (
    *sorted((REPO_ROOT / "compositions").glob("*.yaml")),
    *sorted((REPO_ROOT / "compositions" / "legacy").glob("*.yaml")),
)
SHIPPED_COMPOSITION = REPO_ROOT / "compositions" / "controlplane.yaml"


def sandbox_composition(
    path: Path, git_host: str, provider_config: str | None = None
) -> dict[str, Any]:
    """A repository composition with its Input as shipped but for the git hosts it allows.

    Git repositories are served on loopback over plain http, which the Input
    refuses unless it lists the host and allows http: it lists exactly the
    sandbox's git server (`host:port`), and nothing else private. Everything
    else, the backups' `irsa` trust included, is as shipped. With
    ``provider_config`` it is a composition of its own, named
    ``<provider_config>.<name>``, whose Instances use that ClusterProviderConfig.
    """
    composition: dict[str, Any] = yaml.safe_load(path.read_text())
    if provider_config is not None:
        # A composite picks it with spec.crossplane.compositionRef.
        name = composition["metadata"]["name"]
        composition["metadata"]["name"] = f"{provider_config}.{name}"
    for step in composition["spec"]["pipeline"]:
        function_input = step.get("input") or {}
        if provider_config is not None and "instance" in function_input:
            function_input["instance"]["providerConfigRef"]["name"] = provider_config
        if function_input:
            function_input["source"] = {"allowedHosts": [git_host], "allowHTTP": True}
    return composition


@dataclass(frozen=True)
class CloudSpace:
    """A Space as Upbound Cloud runs them (`Platform.cloud_space`)."""

    provider_config: str
    kube: Kube
    front: SpaceFront
    auth: CloudAuth
    simulator: SpacesSimulator
    composition: str


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
    # Flags of the provider's in place of the shipped ones (`sandbox.shipped`), and
    # the sandbox Space's releases, as an operator copies them from its chart: the
    # steps of upgrades.
    provider_args: tuple[str, ...] = (
        "--poll",
        "5s",
        *(f"--crossplane-release={release}" for release in DEFAULT_RELEASES),
    )
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
        """Remember a started part so it is stopped on exit, and its processes for logs."""
        self._stack.callback(part.stop)
        processes = getattr(part, "processes", None)
        if processes is None:
            processes = [getattr(part, "process", None)]
        self.processes.extend(p for p in processes if isinstance(p, Process))
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
        self._start_space()
        # Flux and the AWS side need nothing of core: they start while core does.
        with ThreadPoolExecutor(max_workers=1) as pool:
            beside = pool.submit(self._start_flux_and_aws)
            self._start_crossplane()
            beside.result()
        # Before the Configuration: its compositions' Input allows this git server's host.
        self.git = self._stack.enter_context(GitServer(self.workdir / "git"))
        self._install_deploy()
        self._install_packages()
        self._start_controllers()
        # Last: core establishes the Configuration's XRDs while the controllers start.
        self._wait_offered()

    def _start_space(self) -> None:
        """The Space: its API server and CRDs, its front, and the simulator playing it."""
        self.space = Kube(self.factory(name="space"))
        self.space.apply_crds(SPACES_CRD)
        self.space.namespace(SPACE_GROUP)
        self.front = self._stack.enter_context(SpaceFront(ROUTER_ADDRESS))
        self.front.register_space(self.space.server)
        self.simulator = self._stack.enter_context(
            SpacesSimulator(
                self.space,
                self._hosted,
                provisioning_delay=self.provisioning_delay,
                deletion_delay=self.deletion_delay,
                front=self.front,
                crossplane_running=self.crossplane_running,
                release=self._release_hosted,
            )
        )

    def _start_crossplane(self) -> None:
        """Core as its chart installs it (the install's first step), our function, the registry."""
        # The install's steps (sandbox.install), as this platform applied them.
        self.installed: list[str] = []
        self.core = CrossplaneCore(self.management, self.workdir / "crossplane")
        self.core.init()
        self.installed.append("crossplane")
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

    def _start_flux_and_aws(self) -> None:
        """Flux (a prerequisite of the install) and SeaweedFS and moto."""
        self.flux = Flux(self.management, self.workdir / "flux")
        self.flux.install()
        self.flux.start()
        self._stack.callback(self.flux.stop)
        self.processes.extend(self.flux.processes)
        self.aws = self._stack.enter_context(Aws(self.workdir / "aws"))

    def _start_controllers(self) -> None:
        """provider-aws's stand-in, our provider and the Backup controller, each as itself.

        Each runs as the ServiceAccount its install ships, once the RBAC
        manager has bound its package's ClusterRole to it (the Backup
        controller's account and rules come from deploy/, already applied),
        with the flags and environment deploy/ ships.
        """
        self.aws.run_standin(
            {
                service: self._kubeconfig_of(self._bound(dependency_name(package), group))
                for package in self.aws_packages
                if (service := MEMBERS.get(package.name)) is not None
                for group in [f"{service}.aws.m.upbound.io"]
            }
        )
        endpoints = self.aws.endpoints_environment()
        # The backup controller's ServiceAccount and the token EKS projects for it;
        # the provider restores irsa Backups with tokens of that account it mints.
        self.irsa = eks.ProjectedToken(self.kube, self.workdir / "irsa")
        self.irsa.start()
        self._stack.callback(self.irsa.stop)
        self._connect_provider()
        provider = shipped.provider()
        self.provider = Controller(
            self.launcher,
            self.workdir,
            "controlplane-provider",
            self._kubeconfig_of(self._bound(PROVIDER.name, "controlplane.spaces.upbound.io")),
            list(provider.with_flags(self.provider_args)),
            env={**provider.env, **endpoints},
        )
        self.provider.start()
        self._started(self.provider)
        backup_controller = shipped.backup_controller()
        self.backup_controller = Controller(
            self.launcher,
            self.workdir,
            "controlplane-backup-controller",
            self._kubeconfig_of(BACKUP_ACCOUNT),
            list(backup_controller.args),
            env={**backup_controller.env, **endpoints, **self.irsa.environment()},
            files={eks.TOKEN_FILE_VARIABLE: self.irsa.path},
        )
        self.backup_controller.start()
        self._started(self.backup_controller)
        # What an operator's Prometheus scrapes (docs/monitoring.md), on the shipped rules.
        self.prometheus = Prometheus(
            self.workdir / "prometheus",
            {
                "controlplane-provider": [self.provider.metrics_port],
                "controlplane-backup-controller": [self.backup_controller.metrics_port],
                "flux": [controller.metrics_port for controller in self.flux.controllers],
                "crossplane": [self.core.metrics_port],
            },
        )
        self.prometheus.start()
        self._started(self.prometheus)

    def composition_for(self, provider_config: str) -> str:
        """Apply the v2 composition with Instances on ``provider_config``; its name."""
        composition = sandbox_composition(V2_COMPOSITION, self.git.host, provider_config)
        kubectl.apply(
            self.kubeconfig, self._manifest(f"composition-{provider_config}", composition)
        )
        return str(composition["metadata"]["name"])

    def self_hosted_group(self, group: str, *, watch: bool) -> str:
        """A Space group reached as the self-hosted docs say; the ClusterProviderConfig's name.

        The operator's kubeconfig names the host cluster's API server (the Space's
        kube-apiserver, not the ingress) with a token of a ServiceAccount whose Role
        grants, in the group, what the provider needs, ``watch`` only if asked, and
        ``get`` of ``upbound-system/ingress-public``. The ClusterProviderConfig is named
        after the group.
        """
        text = service_account_kubeconfig(
            self.space, group, "provider-controlplane", provider_role(group, watch=watch)
        )
        secret = f"space-{group}-kubeconfig"
        self.kube.put_secret(NAMESPACE, secret, {"kubeconfig": text.encode()})
        self._provider_config(
            group, group, {"source": "Secret", "secretRef": _secret_ref(secret, "kubeconfig")}
        )
        return group

    def cloud_space(self, token_lifetime: float, organization: str = "acme") -> CloudSpace:
        """A second Space as Upbound Cloud runs them, and a ClusterProviderConfig ``cloud``.

        Its API (another kube-apiserver) is served at the root of its own front
        (`CLOUD_ADDRESS`), which refuses watches, takes only organisation tokens that
        expire after ``token_lifetime`` seconds and exchanges a robot's token for them;
        the Space writes no connection secrets. The operator's Secret holds the robot's
        token; the provider config names the Space's URL and the token endpoint.
        """
        kube = Kube(self.factory(name="cloud-space"))
        kube.apply_crds(SPACES_CRD)
        kube.namespace(SPACE_GROUP)
        auth = CloudAuth(organization=organization, token_lifetime=token_lifetime)
        front = self._stack.enter_context(SpaceFront(CLOUD_ADDRESS, cloud=auth))
        front.register_space(kube.server)
        simulator = self._stack.enter_context(
            SpacesSimulator(
                kube,
                self._hosted,
                provisioning_delay=self.provisioning_delay,
                deletion_delay=self.deletion_delay,
                front=front,
                crossplane_running=self.crossplane_running,
                release=self._release_hosted,
            )
        )
        name = "cloud"
        self.kube.put_secret(NAMESPACE, "upbound-robot", {"token": auth.robot_token.encode()})
        upbound = {
            "organization": organization,
            "spaceURL": front.url,
            "tokenEndpoint": front.url,
            "certificateAuthorityData": base64.b64encode(front.ca_pem).decode(),
        }
        credentials = {
            "source": "UpboundTokens",
            "secretRef": _secret_ref("upbound-robot", "token"),
            "upbound": upbound,
        }
        self._provider_config(name, SPACE_GROUP, credentials)
        return CloudSpace(name, kube, front, auth, simulator, self.composition_for(name))

    def _provider_config(self, name: str, group: str, credentials: dict[str, Any]) -> None:
        config = {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "ClusterProviderConfig",
            "metadata": {"name": name},
            "spec": {"spaces": {"namespace": group, "credentials": credentials}},
        }
        kubectl.apply(self.kubeconfig, self._manifest(f"providerconfig-{name}", config))

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

    def _release_hosted(self, server: APIServer) -> None:
        """Stop the control plane behind `server`, its ControlPlane deleted: core, then its API.

        Without this every control plane the suite ever made would keep serving on the
        shared etcd until the platform stops, each a kube-apiserver more.
        """
        with self._hosted_lock:
            names = [n for n, plane in self.hosted_control_planes.items() if plane.server is server]
            planes = [self.hosted_control_planes.pop(name) for name in names]
        for plane in planes:
            plane.stop()

    def _manifest(self, name: str, *documents: dict[str, Any]) -> Path:
        path = self.workdir / "manifests" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        return path

    def _kubeconfig_of(self, account: ServiceAccount) -> Path:
        """A kubeconfig of the management cluster as `account`, for the process running as it."""
        path = self.workdir / "identities" / f"{account.namespace}.{account.name}.kubeconfig"
        return identity.kubeconfig(self.management, account, path)

    def _apply(self, name: str) -> None:
        """Apply the install step `name` as docs/install.md does (`sandbox.install`)."""
        step = install.BY_NAME[name]
        path = REPO_ROOT / step.path
        if step.how is install.How.KUSTOMIZE:
            kubectl.apply_kustomization(self.kubeconfig, path)
        elif step.how is install.How.FILE:
            kubectl.apply(self.kubeconfig, path)
        else:
            raise ValueError(f"the sandbox applies step {name} ({step.how.value}) otherwise")
        self.installed.append(name)

    def _install_deploy(self) -> None:
        """What deploy/ ships for the controllers; wait for the Backup CRDs.

        Core's extra rules, the tenancy rules (connection secrets, Flux's
        Kustomizations), the Backup controller (its namespace first: the
        provider's Role lives there), the provider's runtime config and rules.
        """
        for name in ("crossplane-rules", "tenancy", "backup-controller", "provider-runtime"):
            self._apply(name)
        for path in sorted(BACKUP_CRDS.glob("*.yaml")):
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            wait_for(f"CRD {name} Established", partial(self.kube.established, name))

    def _install_packages(self) -> None:
        """Push the packages and install them as docs/install.md does, under production names.

        The Function (by the name the compositions call) and the Provider
        (with its runtime config) first, then the Configuration, whose
        dependencies Crossplane's package manager resolves: ours are there
        already, provider-aws-s3 and -iam (and through them the family) it
        installs from the registry.
        """
        self.aws_packages = provideraws.packages(self.workdir / "packages")
        configuration = Package(self._configuration_root(), CONFIGURATION_NAME)
        for package in (FUNCTION, PROVIDER, *self.aws_packages, configuration):
            self.registry.push(package)
        # The sandbox's own: production package names sent to the loopback registry.
        registries = [self.registry.image_config(), self.registry.image_config(provideraws.PREFIX)]
        kubectl.apply(self.kubeconfig, self._manifest("registries", *registries))
        self._apply("packages")
        self._wait_healthy(("functions", FUNCTION.name), ("providers", PROVIDER.name))
        self._apply("configuration")
        self._wait_healthy(
            ("configurations", CONFIGURATION_NAME),
            *(("providers", dependency_name(package)) for package in self.aws_packages),
        )

    def _wait_offered(self) -> None:
        """Wait until the Configuration's XRDs are Established (and Offered, with a claim)."""
        for path in sorted(p for folder in XRD_FOLDERS for p in folder.glob("*.yaml")):
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            wait_for(
                f"XRD {name} Established and Offered",
                partial(self._offered, name),
                timeout=INSTALL_DEADLINE,
            )

    def _configuration_root(self) -> Path:
        """The Configuration's package root as `make release` assembles it, with our Input."""
        root = self.workdir / "packages" / "configuration"
        subprocess.run(
            [sys.executable, "-m", "tools.packages", "configuration", str(root)],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
            timeout=60,
        )
        for relative, text in self._compositions().items():
            (root / relative).write_text(text)
        return root

    def _wait_healthy(self, *packages: tuple[str, str]) -> None:
        for plural, name in packages:
            wait_for(
                f"{plural} {name} Installed and Healthy",
                partial(package_healthy, self.kube, plural, name),
                timeout=INSTALL_DEADLINE,
            )

    def _bound(self, package: str, group: str) -> ServiceAccount:
        """The ServiceAccount provider `package` runs as, once RBAC lets it watch its kinds.

        It is the account of the Deployment the package runtime made for the
        package's revision; the RBAC manager binds the revision's system
        ClusterRole to it, which this waits for (a watch of `group`'s kinds).
        """
        apps: Any = client.AppsV1Api(self.kube.api)

        def account() -> ServiceAccount | None:
            # Its pods' labels name the package (core's Deployment runtime's selectors).
            for deployment in apps.list_namespaced_deployment(NAMESPACE).items:
                labels = deployment.spec.template.metadata.labels or {}
                if labels.get("pkg.crossplane.io/provider") == package:
                    return ServiceAccount(
                        NAMESPACE, deployment.spec.template.spec.service_account_name
                    )
            return None

        found = wait_for(f"the ServiceAccount of {package}", account, timeout=INSTALL_DEADLINE)
        wait_for(
            f"the RBAC manager binding {found.username}",
            partial(identity.allowed, self.management, found, "watch", group, WATCHED[group]),
            timeout=INSTALL_DEADLINE,
        )
        return found

    def _connect_provider(self) -> None:
        """The Space's kubeconfig secret and the guide's ClusterProviderConfig."""
        self._write_space_kubeconfig()
        self.installed.append("space-kubeconfig")
        self._apply("provider-config")

    def _write_space_kubeconfig(self) -> None:
        """The operator's Space kubeconfig: the front's root with the Space's token."""
        self.kube.put_secret(
            NAMESPACE, SPACE_SECRET, {"kubeconfig": self.front.space_kubeconfig().encode()}
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

    def _compositions(self) -> dict[Path, str]:
        """The compositions with their Input set allowing this git server."""
        return {
            path.relative_to(REPO_ROOT): yaml.safe_dump(
                sandbox_composition(path, self.git.host), sort_keys=False
            )
            for path in COMPOSITIONS
        }

    def logs(self, lines: int = 40) -> str:
        """The tail of every process's log (and the in-process stand-in's), for a failure."""
        with self._hosted_lock:
            cores = [plane.core for plane in self.hosted_control_planes.values()]
        hosted = [process for core in cores if core is not None for process in core.processes]
        tails = [
            f"--- {process.name} ({process.log_path})\n{process.log_tail(lines)}"
            for process in (*self.processes, *hosted)
        ]
        standin = self.workdir / "aws" / "aws-standin.log"
        if standin.is_file():
            text = "\n".join(standin.read_text(errors="replace").splitlines()[-lines:])
            tails.append(f"--- aws stand-in ({standin})\n{text}")
        return "\n\n".join(tails)


def _secret_ref(name: str, key: str) -> dict[str, str]:
    return {"namespace": NAMESPACE, "name": name, "key": key}


@contextlib.contextmanager
def running(workdir: Path | None = None, **options: Any) -> Iterator[Platform]:
    """A started platform in `workdir` (a new temporary folder if None), stopped on exit."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sandbox-")))
        with Platform(workdir, **options) as platform:
            yield platform
