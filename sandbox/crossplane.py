"""Crossplane core v2 as a process, and the sandbox playing its package runtime.

Core runs with `--package-runtime=External`: it unpacks and installs packages
but deploys nothing, so `PackageRuntime` does what a runtime would for every
active Function and Provider revision: it writes the server certificate
Secret the revision names, and reports through `/status` the TLS secret names,
the Function's gRPC endpoint (our `function-controlplane serve`, started by the
sandbox) and RuntimeHealthy. Core dials functions with mTLS only, so the
function serves a certificate signed by core's `crossplane-root-ca`.

Core's webhook (deletion ordering with Usages) is served on a loopback port:
the webhook configuration `core init` writes names a Service, which nothing
routes here, so it is pointed at `https://127.0.0.1:PORT`.

Core is installed as its Helm chart installs it (`sandbox.chart`): the
chart's ServiceAccounts, ClusterRoles and bindings are applied, `core init`
and `core start` run as the `crossplane` ServiceAccount, and the chart's
RBAC manager (`crossplane rbac start`) as `rbac-manager`, each with a token
of its own (`sandbox.identity`), so core may do exactly what the chart and
the roles aggregated to it allow. The RBAC manager runs in a network
namespace of its own (`sandbox.netns`): it binds :8080 whatever it is told.

The same `CrossplaneCore` runs on the management cluster and inside hosted
control planes (`sandbox.hosted`); with no pod to probe, `running` tells
whether it is up.
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox import chart, identity, kubectl
from sandbox.apiserver import APIServer, StartError, free_port
from sandbox.identity import ServiceAccount
from sandbox.netns import NetworkNamespace
from sandbox.paths import TOOLS, TOOLS_BIN
from sandbox.pki import KeyPair, issue
from sandbox.processes import Process
from sandbox.spaces import Kube, condition

CORE_BIN = TOOLS_BIN / "crossplane-core"
CORE_CRDS = TOOLS / "crossplane-core" / "crds"
CORE_WEBHOOK_CONFIGS = TOOLS / "crossplane-core" / "webhookconfigurations"
NAMESPACE = "crossplane-system"
SERVICE_ACCOUNT = ServiceAccount(NAMESPACE, chart.CORE_SERVICE_ACCOUNT)
RBAC_MANAGER_SERVICE_ACCOUNT = ServiceAccount(NAMESPACE, chart.RBAC_MANAGER_SERVICE_ACCOUNT)
ROOT_CA_SECRET = "crossplane-root-ca"
SERVER_SECRET = "crossplane-tls-server"
CLIENT_SECRET = "crossplane-tls-client"
NO_USAGES_WEBHOOK = "crossplane-no-usages"
PKG = ("pkg.crossplane.io", "v1")
_INIT_ATTEMPTS = 5
_LOOPBACK = "127.0.0.1"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _secret_data(kube: Kube, name: str) -> dict[str, bytes]:
    found = kube.secret(NAMESPACE, name)
    if found is None:
        raise StartError(f"core init wrote no secret {NAMESPACE}/{name}")
    return {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}


def condition_true(obj: dict[str, Any] | None, type_: str) -> bool:
    """Whether the object's condition of `type_` has status True."""
    return condition(obj, type_).get("status") == "True"


def package_healthy(kube: Kube, plural: str, name: str) -> bool:
    """Whether the package is Installed and Healthy; `plural`: functions, providers..."""
    found = kube.get(plural, None, name, *PKG)
    return condition_true(found, "Installed") and condition_true(found, "Healthy")


@cache
def core_crd_names(folder: Path = CORE_CRDS) -> frozenset[str]:
    """The names of the CRDs core installs (the files of its CRDS_PATH)."""
    return frozenset(
        yaml.safe_load(path.read_text())["metadata"]["name"] for path in folder.glob("*.yaml")
    )


def unestablished(expected: Iterable[str], crds: Iterable[dict[str, Any]]) -> set[str]:
    """The names in `expected` that `crds` lacks or holds without Established True."""
    established = {crd["metadata"]["name"] for crd in crds if condition_true(crd, "Established")}
    return set(expected) - established


def _write_certs(folder: Path, pair: KeyPair, ca: bytes) -> Path:
    """The layout Kubernetes gives a mounted TLS Secret: tls.crt, tls.key, ca.crt."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (("tls.crt", pair.cert), ("tls.key", pair.key), ("ca.crt", ca)):
        path = folder / name
        path.touch(mode=0o600)
        path.write_bytes(data)
    return folder


@dataclass
class CrossplaneCore:
    """Crossplane core on one API server: `core init`, then `core start`.

    `name` names its processes in logs and errors (one core per cluster).
    """

    server: APIServer
    workdir: Path
    name: str = "crossplane"
    # Installed as its Helm chart installs it, as its own ServiceAccount, with
    # its RBAC manager (which needs the cluster's ClusterRole aggregation
    # controller); without, as admin, as a hosted control plane's core (the
    # Space's install, not ours) runs here.
    chart_rbac: bool = True
    webhook_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: Process | None = None
    rbac_manager: Process | None = None

    def __post_init__(self) -> None:
        self.kube = Kube(self.server)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "crossplane.log"
        self.chart = chart.render(NAMESPACE)
        # Core's and its RBAC manager's own kubeconfigs, once `init` installed the chart.
        self.kubeconfig_path = self.workdir / "crossplane.kubeconfig"
        self.rbac_manager_kubeconfig_path = self.workdir / "rbac-manager.kubeconfig"
        self._network: NetworkNamespace | None = None

    @property
    def root_ca(self) -> KeyPair:
        """Core's CA: it signs core's client certificate and the servers core calls."""
        data = _secret_data(self.kube, ROOT_CA_SECRET)
        return KeyPair(cert=data["tls.crt"], key=data["tls.key"])

    def _environment(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.kubeconfig_path),
            "POD_NAMESPACE": NAMESPACE,
            "POD_SERVICE_ACCOUNT": SERVICE_ACCOUNT.name,
            "TLS_CA_SECRET_NAME": ROOT_CA_SECRET,
            "TLS_SERVER_SECRET_NAME": SERVER_SECRET,
            "TLS_CLIENT_SECRET_NAME": CLIENT_SECRET,
            "CRDS_PATH": str(CORE_CRDS),
            "WEBHOOK_CONFIGS_PATH": str(CORE_WEBHOOK_CONFIGS),
            "ENABLE_WEBHOOKS": "true",
            "WEBHOOK_SERVICE_NAME": "crossplane-webhooks",
            "WEBHOOK_SERVICE_NAMESPACE": NAMESPACE,
            "WEBHOOK_SERVICE_PORT": "9443",
        }

    def install(self) -> None:
        """Apply what `helm install` of core's chart makes; mint its two accounts' tokens.

        The chart's Deployments and Services are applied too (nothing runs
        them here), so the cluster holds the objects a real install holds.
        """
        self.kube.namespace(NAMESPACE)
        if not self.chart_rbac:
            self.kubeconfig_path = self.server.kubeconfig_path
            # The package fetcher reads its service account's image pull secrets.
            with contextlib.suppress(ApiException):
                self.kube.core.create_namespaced_service_account(
                    NAMESPACE, {"metadata": {"name": SERVICE_ACCOUNT.name}}
                )
            return
        manifest = self.workdir / "crossplane-chart.yaml"
        manifest.write_text(self.chart.manifest())
        kubectl.apply(self.server.kubeconfig_path, manifest)
        identity.kubeconfig(self.server, SERVICE_ACCOUNT, self.kubeconfig_path)
        identity.kubeconfig(
            self.server, RBAC_MANAGER_SERVICE_ACCOUNT, self.rbac_manager_kubeconfig_path
        )

    def init(self, *, timeout: float = 120.0) -> None:
        """Install the chart, then run `core init` until it succeeds, as a kubelet retries one.

        On a fresh API server its first run fails once (`no matches for kind
        "Lock"`: the CRD it has just created is not served yet).
        """
        if not CORE_BIN.is_file():
            raise FileNotFoundError(f"{CORE_BIN} is missing: run tools/build.sh crossplane_core")
        self.install()
        for attempt in range(1, _INIT_ATTEMPTS + 1):
            init = Process(
                f"{self.name}-init",
                [str(CORE_BIN), *self.chart.args(*chart.CORE_INIT)],
                self.workdir / "crossplane-init.log",
                env=self._environment(),
            )
            init.start()
            try:
                code = init.wait(timeout)
            finally:
                init.stop()
            if code == 0:
                return
            if attempt == _INIT_ATTEMPTS:
                raise StartError(f"core init failed {attempt} times:\n{init.log_tail()}")

    def start(self, *, timeout: float = 120.0) -> None:
        """Point the webhooks at loopback and start core; wait until it is ready."""
        ca = self.root_ca
        client_data = _secret_data(self.kube, CLIENT_SECRET)
        client_dir = _write_certs(
            self.workdir / "tls" / "client",
            KeyPair(cert=client_data["tls.crt"], key=client_data["tls.key"]),
            client_data.get("ca.crt", ca.cert),
        )
        # The Service's DNS names in init's server certificate mean nothing here:
        # the API server calls the webhooks at 127.0.0.1.
        server_dir = _write_certs(
            self.workdir / "tls" / "server", issue(ca, "crossplane-webhooks"), ca.cert
        )
        self._route_webhooks(ca.cert)
        self.process = Process(
            self.name,
            [
                str(CORE_BIN),
                # The chart's arguments (deploy/crossplane/values.yaml adds the
                # circuit breaker's), then the sandbox's own.
                *self.chart.args(*chart.CORE),
                "--package-runtime=External",
                f"--webhook-port={self.webhook_port}",
                f"--metrics-port={self.metrics_port}",
                f"--health-probe-port={self.health_port}",
                f"--tls-server-certs-dir={server_dir}",
                f"--tls-client-certs-dir={client_dir}",
                f"--xpkg-cache-dir={self.workdir / 'cache' / 'xpkg'}",
                f"--xfn-cache-dir={self.workdir / 'cache' / 'xfn'}",
                # Quick convergence for a sandbox; production keeps the defaults.
                "--poll-interval=15s",
                "--sync-interval=5m",
            ],
            self.log_path,
            env=self._environment(),
        )
        (self.workdir / "cache" / "xpkg").mkdir(parents=True, exist_ok=True)
        (self.workdir / "cache" / "xfn").mkdir(parents=True, exist_ok=True)
        self.process.start(self._ready, timeout=timeout)
        if self.chart_rbac:
            self._start_rbac_manager()

    def _start_rbac_manager(self) -> None:
        """`crossplane rbac start` as the chart runs it, in a network namespace of its own."""
        self._network = NetworkNamespace()
        self._network.forward(urllib3.util.parse_url(self.server.url).port or 443)
        self.rbac_manager = Process(
            f"{self.name}-rbac-manager",
            self._network.command([str(CORE_BIN), *self.chart.args(*chart.RBAC_MANAGER)]),
            self.workdir / "rbac-manager.log",
            env={
                "KUBECONFIG": str(self.rbac_manager_kubeconfig_path),
                "POD_NAMESPACE": NAMESPACE,
            },
        )
        self.rbac_manager.start()

    @property
    def processes(self) -> list[Process]:
        """Core's and its RBAC manager's processes, once started."""
        return [p for p in (self.process, self.rbac_manager) if p is not None]

    def stop(self) -> None:
        """Stop the RBAC manager and core."""
        for process in reversed(self.processes):
            process.stop()
        if self._network is not None:
            self._network.close()

    def running(self) -> bool:
        """Core's health without a pod: its process alive and ready, and its CRDs Established."""
        if self.process is None or not self.process.running() or not self._ready():
            return False
        try:
            listed = self.kube.extensions.list_custom_resource_definition()
        except (ApiException, OSError, urllib3.exceptions.HTTPError):
            return False
        crds = self.kube.api.sanitize_for_serialization(listed)["items"]
        return not unestablished(core_crd_names(), crds)

    def _ready(self) -> bool:
        try:
            with _NO_PROXY.open(f"http://{_LOOPBACK}:{self.health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def _route_webhooks(self, ca: bytes) -> None:
        base = f"https://{_LOOPBACK}:{self.webhook_port}"
        admission: Any = client.AdmissionregistrationV1Api(self.kube.api)
        config = admission.read_validating_webhook_configuration(NO_USAGES_WEBHOOK)
        body = self.kube.api.sanitize_for_serialization(config)
        for webhook in body["webhooks"]:
            path = webhook["clientConfig"].get("service", {}).get("path", "")
            webhook["clientConfig"] = {"url": f"{base}{path}", "caBundle": _b64(ca)}
        admission.replace_validating_webhook_configuration(NO_USAGES_WEBHOOK, body)


def _owned_by(revision: dict[str, Any]) -> list[dict[str, Any]]:
    """The controller reference to a ProviderRevision, as the Deployment runtime sets it."""
    return [
        {
            "apiVersion": "/".join(PKG),
            "kind": "ProviderRevision",
            "name": revision["metadata"]["name"],
            "uid": revision["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


@dataclass
class PackageRuntime:
    """Plays the package runtime: active revisions get TLS secrets, endpoints, RuntimeHealthy.

    For a Provider it also makes what core's Deployment runtime makes: the
    ServiceAccount its DeploymentRuntimeConfig names (the revision's name
    without one) and a Deployment running as it, both controlled by the
    revision. No kubelet runs that Deployment (the sandbox runs the program);
    it is there because core's RBAC manager binds a provider's system
    ClusterRole to the ServiceAccounts of the Deployments its revision
    controls, and the sandbox gives the program a token of that account.

    Args:
        kube: The cluster core runs on.
        ca: Core's root CA, which signs the packages' server certificates.
        server_certs: The certificate the packages' servers present (our function's).
        endpoints: The gRPC endpoint of each Function package, by package name
            (metadata.name in its crossplane.yaml).
        interval: Seconds between sweeps.
    """

    kube: Kube
    ca: KeyPair
    server_certs: KeyPair
    endpoints: dict[str, str]
    interval: float = 0.5
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _deployed: set[str] = field(default_factory=set)

    def __enter__(self) -> PackageRuntime:
        self._thread = threading.Thread(target=self._loop, name="package-runtime", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def sweep(self) -> None:
        """One pass over every Function and Provider revision."""
        for plural in ("functionrevisions", "providerrevisions"):
            found = self.kube.custom.list_cluster_custom_object(*PKG, plural)
            for revision in found["items"]:
                if revision["spec"].get("desiredState") == "Active":
                    self._run(plural, revision)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(ApiException, OSError):
                self.sweep()

    def _run(self, plural: str, revision: dict[str, Any]) -> None:
        spec, status = revision["spec"], revision.get("status") or {}
        package = (revision["metadata"].get("labels") or {}).get("pkg.crossplane.io/package", "")
        # Core names no TLS secrets under the External runtime: the runtime picks
        # them (as the Deployment runtime would) and reports them.
        names = {
            "tlsServerSecretName": spec.get("tlsServerSecretName") or f"{package}-tls-server",
            "tlsClientSecretName": spec.get("tlsClientSecretName") or f"{package}-tls-client",
        }
        wanted: dict[str, Any] = {
            key: name for key, name in names.items() if status.get(key) != name
        }
        if self.kube.secret(NAMESPACE, names["tlsServerSecretName"]) is None:
            self.kube.put_secret(
                NAMESPACE,
                names["tlsServerSecretName"],
                {
                    "tls.crt": self.server_certs.cert,
                    "tls.key": self.server_certs.key,
                    "ca.crt": self.ca.cert,
                },
            )
        if plural == "providerrevisions" and revision["metadata"]["uid"] not in self._deployed:
            self._deploy(revision, package)
        if plural == "functionrevisions":
            endpoint = self.endpoints.get(package)
            if endpoint is None:
                return
            if status.get("endpoint") != endpoint:
                wanted["endpoint"] = endpoint
        conditions = list(status.get("conditions") or [])
        healthy = next((c for c in conditions if c.get("type") == "RuntimeHealthy"), None)
        if healthy is None or healthy.get("status") != "True":
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            conditions = [c for c in conditions if c.get("type") != "RuntimeHealthy"]
            conditions.append(
                {
                    "type": "RuntimeHealthy",
                    "status": "True",
                    "reason": "HealthyPackageRevision",
                    "lastTransitionTime": now,
                }
            )
            wanted["conditions"] = conditions
        if not wanted:
            return
        # Through /status: a plain patch of status is dropped silently.
        self.kube.custom.patch_cluster_custom_object_status(
            *PKG,
            plural,
            revision["metadata"]["name"],
            {
                "metadata": {"resourceVersion": revision["metadata"]["resourceVersion"]},
                "status": wanted,
            },
        )

    def _deploy(self, revision: dict[str, Any], package: str) -> None:
        """The ServiceAccount and Deployment core's Deployment runtime makes for a provider."""
        template = self._runtime_config(package)
        account = ((template.get("serviceAccountTemplate") or {}).get("metadata") or {}).get(
            "name"
        ) or revision["metadata"]["name"]
        name = ((template.get("deploymentTemplate") or {}).get("metadata") or {}).get(
            "name"
        ) or revision["metadata"]["name"]
        labels = {"pkg.crossplane.io/revision": revision["metadata"]["name"]}
        pod_labels = {**labels, "pkg.crossplane.io/provider": package}
        owners = _owned_by(revision)
        apps: Any = client.AppsV1Api(self.kube.api)
        with contextlib.suppress(ApiException):
            self.kube.core.create_namespaced_service_account(
                NAMESPACE, {"metadata": {"name": account, "ownerReferences": owners}}
            )
        with contextlib.suppress(ApiException):
            apps.create_namespaced_deployment(
                NAMESPACE,
                {
                    "metadata": {"name": name, "ownerReferences": owners},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": pod_labels},
                            "spec": {
                                "serviceAccountName": account,
                                "containers": [
                                    {"name": "package-runtime", "image": revision["spec"]["image"]}
                                ],
                            },
                        },
                    },
                },
            )
        self._deployed.add(revision["metadata"]["uid"])

    def _runtime_config(self, package: str) -> dict[str, Any]:
        """The spec of the DeploymentRuntimeConfig the Provider `package` names ("default" if none).

        Core copies a Provider's runtimeConfigRef into its revisions only under
        its Deployment runtime (internal/controller/pkg/manager), so it is read
        from the Provider, as that runtime would have it.
        """
        provider = self.kube.get("providers", None, package, *PKG) or {}
        name = ((provider.get("spec") or {}).get("runtimeConfigRef") or {}).get("name")
        config = name or "default"
        found = self.kube.get("deploymentruntimeconfigs", None, config, PKG[0], "v1beta1")
        return dict((found or {}).get("spec") or {})
