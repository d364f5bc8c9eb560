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

from sandbox.apiserver import APIServer, StartError, free_port
from sandbox.paths import TOOLS, TOOLS_BIN
from sandbox.pki import KeyPair, issue
from sandbox.processes import Process
from sandbox.spaces import Kube, condition

CORE_BIN = TOOLS_BIN / "crossplane-core"
CORE_CRDS = TOOLS / "crossplane-core" / "crds"
CORE_WEBHOOK_CONFIGS = TOOLS / "crossplane-core" / "webhookconfigurations"
NAMESPACE = "crossplane-system"
SERVICE_ACCOUNT = "crossplane"
ROOT_CA_SECRET = "crossplane-root-ca"
SERVER_SECRET = "crossplane-tls-server"
CLIENT_SECRET = "crossplane-tls-client"
NO_USAGES_WEBHOOK = "crossplane-no-usages"
PKG = ("pkg.crossplane.io", "v1")
_INIT_ATTEMPTS = 5
# Core meters the watch events that wake each composite: a bucket of 100 tokens
# by default, refilled at 1 a second, an Update event costing 2 (controller-runtime
# maps both its old and new object), open for 5 minutes once empty
# (crossplane/crossplane internal/circuit/token_bucket.go; the flags are core's
# --circuit-breaker-*). Measured here (docs/design.md, "What a ControlPlane costs
# Crossplane core's circuit breaker"):
# creating the fullest ControlPlane writes each of its 18 composed objects 5 to 7
# times and the composite about 18 times, about 250 tokens within seconds when the
# clouds answer at once, as the stand-ins do; and Flux writes a Kustomization's
# status 7 times each interval (14 tokens), so 8 stages at the contract's shortest
# interval, 10 s, take 11.2 tokens a second for as long as they run. Neither is a
# loop; 100 and 1 a second hold neither. 400 and 12 a second hold both, while a
# loop, tens to hundreds of events a second, still opens the breaker within seconds.
CIRCUIT_BREAKER_BURST = 400
CIRCUIT_BREAKER_REFILL_PER_SECOND = 12
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
    webhook_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: Process | None = None

    def __post_init__(self) -> None:
        self.kube = Kube(self.server)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "crossplane.log"

    @property
    def root_ca(self) -> KeyPair:
        """Core's CA: it signs core's client certificate and the servers core calls."""
        data = _secret_data(self.kube, ROOT_CA_SECRET)
        return KeyPair(cert=data["tls.crt"], key=data["tls.key"])

    def _environment(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.server.kubeconfig_path),
            "POD_NAMESPACE": NAMESPACE,
            "POD_SERVICE_ACCOUNT": SERVICE_ACCOUNT,
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

    def init(self, *, timeout: float = 120.0) -> None:
        """Run `core init` until it succeeds, as a kubelet restarts an init container.

        On a fresh API server its first run fails once (`no matches for kind
        "Lock"`: the CRD it has just created is not served yet).
        """
        if not CORE_BIN.is_file():
            raise FileNotFoundError(f"{CORE_BIN} is missing: run tools/build.sh crossplane_core")
        self.kube.namespace(NAMESPACE)
        # The package fetcher reads its service account's image pull secrets.
        with contextlib.suppress(ApiException):
            self.kube.core.create_namespaced_service_account(
                NAMESPACE, {"metadata": {"name": SERVICE_ACCOUNT}}
            )
        for attempt in range(1, _INIT_ATTEMPTS + 1):
            init = Process(
                f"{self.name}-init",
                [str(CORE_BIN), "core", "init", "--activation=*"],
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
                "core",
                "start",
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
                # Room for a ControlPlane's creation and its syncs, as docs/install.md
                # asks of every install: see CIRCUIT_BREAKER_BURST.
                f"--circuit-breaker-burst={CIRCUIT_BREAKER_BURST}",
                f"--circuit-breaker-refill-rate={CIRCUIT_BREAKER_REFILL_PER_SECOND}",
            ],
            self.log_path,
            env=self._environment(),
        )
        (self.workdir / "cache" / "xpkg").mkdir(parents=True, exist_ok=True)
        (self.workdir / "cache" / "xfn").mkdir(parents=True, exist_ok=True)
        self.process.start(self._ready, timeout=timeout)

    def stop(self) -> None:
        """Stop core."""
        if self.process is not None:
            self.process.stop()

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


@dataclass
class PackageRuntime:
    """Plays the package runtime: active revisions get TLS secrets, endpoints, RuntimeHealthy.

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
