"""Real etcd and kube-apiserver processes: the clusters of the sandbox and the tests.

`run_etcd` starts one etcd on loopback; `run_apiserver` starts a kube-apiserver
on loopback that stores its objects in that etcd under one key prefix, with its
own CA, serving certificate, service-account signing key and an admin client
certificate (group system:masters) written into a kubeconfig. Each further API
server on the same etcd under another prefix is a separate, cheap cluster:
`APIServerFactory` starts such servers and stops them all when closed.

Everything runs in a temporary folder that is removed on exit; processes get
SIGTERM first and SIGKILL if they have not exited by a deadline. The binaries
come from `tools/build.sh` (`.tools/bin/kube-apiserver`, `.tools/bin/etcd`).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sandbox.paths import TOOLS_BIN

KUBE_APISERVER_BIN = TOOLS_BIN / "kube-apiserver"
ETCD_BIN = TOOLS_BIN / "etcd"

DEFAULT_ETCD_PREFIX = "/registry"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
# The first address of the service range: the in-cluster `kubernetes` Service.
_KUBERNETES_SERVICE_IP = "10.0.0.1"
_LOOPBACK = "127.0.0.1"
_PORT_ATTEMPTS = 3
_POLL_INTERVAL = 0.1
_STOP_GRACE = 15.0
_LOG_TAIL_LINES = 40

# Loopback only: never let a proxy from the environment see these requests.
_NO_PROXY = urllib.request.ProxyHandler({})


class StartError(RuntimeError):
    """A process exited or did not become ready in time; the message holds its log tail."""


def free_port() -> int:
    """Return a TCP port on loopback that was free a moment ago.

    Another process may take it before ours binds it; the starters retry on
    "address already in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


class _Process:
    """A child process whose output goes to a log file, stopped term-then-kill."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        try:
            self._popen = subprocess.Popen(
                list(argv),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C on the test run reaches pytest, whose
                # teardown stops it, not the child half-way through.
                start_new_session=True,
            )
        except BaseException:
            self._log.close()
            raise

    @property
    def pid(self) -> int:
        """Its process id."""
        return self._popen.pid

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the process's output."""
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def exited(self) -> bool:
        """Whether the process has exited."""
        return self._popen.poll() is not None

    def raise_if_exited(self) -> None:
        """Raise StartError with the log tail if the process has exited."""
        code = self._popen.poll()
        if code is not None:
            raise StartError(
                f"{self.name} exited with status {code}; last output:\n{self.log_tail()}"
            )

    def wait_exit(self, timeout: float) -> None:
        """Block until the process exits or `timeout` seconds pass."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=max(timeout, 0.0))

    def stop(self, grace: float = _STOP_GRACE) -> None:
        """SIGTERM, then SIGKILL if the process is still there after `grace` seconds."""
        try:
            if self._popen.poll() is None:
                self._popen.terminate()
                try:
                    self._popen.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    self._popen.kill()
                    self._popen.wait()
        finally:
            self._log.close()


def _poll_until(process: _Process, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Probe `ready` until it holds, the process exits, or `timeout` seconds pass.

    Between probes it waits on the process itself, so an early exit is seen at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        process.raise_if_exited()
        if ready():
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise StartError(
                f"{process.name}: {what} not within {timeout:g}s; last output:\n"
                f"{process.log_tail()}"
            )
        process.wait_exit(min(_POLL_INTERVAL, remaining))


def _address_in_use(error: StartError) -> bool:
    return "address already in use" in str(error).lower()


# --- certificates -------------------------------------------------------------


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


@dataclass(frozen=True)
class _PKI:
    """The PEM files one API server needs: CA, serving pair, admin pair, SA keys."""

    ca_cert: bytes
    serving_cert: bytes
    serving_key: bytes
    admin_cert: bytes
    admin_key: bytes
    service_account_key: bytes
    service_account_public_key: bytes

    @classmethod
    def generate(cls, cluster: str) -> _PKI:
        """Make a fresh CA and the certificates it signs, valid for a day."""
        now = datetime.datetime.now(datetime.UTC)
        not_before = now - datetime.timedelta(minutes=5)
        not_after = now + datetime.timedelta(days=1)

        ca_key = _new_key()
        ca_name = _name(f"{cluster}-ca")
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )

        def leaf(
            subject: x509.Name,
            key: ec.EllipticCurvePrivateKey,
            usage: x509.ObjectIdentifier,
            names: list[x509.GeneralName] | None = None,
        ) -> x509.Certificate:
            builder = (
                x509.CertificateBuilder()
                .subject_name(subject)
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(not_before)
                .not_valid_after(not_after)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=True,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=False,
                        crl_sign=False,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                    critical=False,
                )
            )
            if names:
                builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
            return builder.sign(ca_key, hashes.SHA256())

        serving_key = _new_key()
        serving_cert = leaf(
            _name("kube-apiserver"),
            serving_key,
            ExtendedKeyUsageOID.SERVER_AUTH,
            [
                x509.DNSName("localhost"),
                x509.DNSName("kubernetes"),
                x509.DNSName("kubernetes.default"),
                x509.DNSName("kubernetes.default.svc"),
                x509.DNSName("kubernetes.default.svc.cluster.local"),
                x509.IPAddress(ipaddress.ip_address(_LOOPBACK)),
                x509.IPAddress(ipaddress.ip_address(_KUBERNETES_SERVICE_IP)),
            ],
        )
        # system:masters is bound to cluster-admin and bypasses authorization.
        admin_key = _new_key()
        admin_cert = leaf(
            _name("admin", "system:masters"), admin_key, ExtendedKeyUsageOID.CLIENT_AUTH
        )
        sa_key = _new_key()
        return cls(
            ca_cert=_cert_pem(ca_cert),
            serving_cert=_cert_pem(serving_cert),
            serving_key=_key_pem(serving_key),
            admin_cert=_cert_pem(admin_cert),
            admin_key=_key_pem(admin_key),
            service_account_key=_key_pem(sa_key),
            service_account_public_key=sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )


def _write(path: Path, data: bytes | str) -> Path:
    """Write a file readable by its owner only."""
    path.touch(mode=0o600)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def _kubeconfig(name: str, url: str, pki: _PKI) -> str:
    """An admin kubeconfig with the credentials inline (JSON, which is valid YAML)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": url, "certificate-authority-data": b64(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": f"{name}-admin",
                "user": {
                    "client-certificate-data": b64(pki.admin_cert),
                    "client-key-data": b64(pki.admin_key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
        "current-context": name,
        "preferences": {},
    }
    return json.dumps(config, indent=2) + "\n"


# --- etcd ---------------------------------------------------------------------


@dataclass(frozen=True)
class Etcd:
    """A running etcd: where its clients connect, and where it keeps data and log."""

    url: str
    data_dir: Path
    log_path: Path

    def healthy(self) -> bool:
        """Whether etcd answers /health with health "true"."""
        opener = urllib.request.build_opener(_NO_PROXY)
        try:
            with opener.open(f"{self.url}/health", timeout=2) as response:
                body = json.loads(response.read())
        except (OSError, ValueError):
            return False
        return isinstance(body, dict) and body.get("health") == "true"


@contextlib.contextmanager
def run_etcd(
    *,
    binary: Path = ETCD_BIN,
    parent_dir: Path | None = None,
    timeout: float = 30.0,
) -> Iterator[Etcd]:
    """Start a single-member etcd on loopback and stop it on exit.

    Args:
        binary: The etcd binary.
        parent_dir: Where to create its temporary folder (the system default if None).
        timeout: Seconds to wait for /health.

    Yields:
        The running etcd. Its folder is removed once it has stopped.
    """
    if not binary.is_file():
        raise FileNotFoundError(f"{binary} is missing: run tools/build.sh etcd")
    workdir = Path(tempfile.mkdtemp(prefix="etcd-", dir=parent_dir))
    process: _Process | None = None
    try:
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            client = f"http://{_LOOPBACK}:{free_port()}"
            peer = f"http://{_LOOPBACK}:{free_port()}"
            etcd = Etcd(url=client, data_dir=workdir / "data", log_path=workdir / "etcd.log")
            argv = [
                str(binary),
                "--name=test",
                f"--data-dir={etcd.data_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=test={peer}",
                "--initial-cluster-state=new",
                # Test data: losing it on a crash is fine, waiting for disks is not.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ]
            process = _Process("etcd", argv, etcd.log_path, workdir)
            try:
                _poll_until(process, etcd.healthy, timeout=timeout, what="/health")
            except StartError as error:
                process.stop()
                process = None
                if attempt == _PORT_ATTEMPTS or not _address_in_use(error):
                    raise
                shutil.rmtree(etcd.data_dir, ignore_errors=True)
                continue
            yield etcd
            return
    finally:
        if process is not None:
            process.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# --- kube-apiserver -----------------------------------------------------------


@dataclass(frozen=True)
class APIServer:
    """A running kube-apiserver and the admin credentials to reach it."""

    name: str
    url: str
    etcd_prefix: str
    kubeconfig: str
    kubeconfig_path: Path
    ca_path: Path
    client_cert_path: Path
    client_key_path: Path
    log_path: Path
    lifecycle: _Lifecycle | None = field(default=None, compare=False, repr=False)

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        process = self.lifecycle.process if self.lifecycle is not None else None
        return process.pid if process is not None else None

    def stop(self) -> None:
        """Stop the server process (its address, certificates and data stay)."""
        if self.lifecycle is not None:
            self.lifecycle.stop()

    def start(self) -> None:
        """Start it again on the same address, and wait for /readyz."""
        if self.lifecycle is not None:
            self.lifecycle.start(self.ready)

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts this server's CA and presents the admin certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_path))
        context.load_cert_chain(str(self.client_cert_path), str(self.client_key_path))
        return context

    def get(self, path: str, *, timeout: float = 10.0) -> tuple[int, str]:
        """GET `path` as admin; return the HTTP status and the body, also for errors."""
        opener = urllib.request.build_opener(
            _NO_PROXY, urllib.request.HTTPSHandler(context=self.ssl_context())
        )
        try:
            with opener.open(f"{self.url}{path}", timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def ready(self) -> bool:
        """Whether /readyz answers 200."""
        try:
            status, _ = self.get("/readyz", timeout=5.0)
        except (OSError, ssl.SSLError):
            return False
        return status == 200


class _Lifecycle:
    """Stops and starts one API server process with the same flags (a restart)."""

    def __init__(self, argv: Sequence[str], log_path: Path, workdir: Path, timeout: float) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.workdir = workdir
        self.timeout = timeout
        self.process: _Process | None = None

    def start(self, ready: Callable[[], bool]) -> None:
        self.process = _Process("kube-apiserver", self.argv, self.log_path, self.workdir)
        _poll_until(self.process, ready, timeout=self.timeout, what="/readyz")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


@contextlib.contextmanager
def run_apiserver(
    etcd: Etcd,
    *,
    etcd_prefix: str = DEFAULT_ETCD_PREFIX,
    name: str = "kube",
    binary: Path = KUBE_APISERVER_BIN,
    extra_args: Sequence[str] = (),
    parent_dir: Path | None = None,
    timeout: float = 90.0,
    service_account_issuer: str | None = None,
) -> Iterator[APIServer]:
    """Start a kube-apiserver on loopback backed by `etcd` under `etcd_prefix`.

    Args:
        etcd: The etcd to store objects in.
        etcd_prefix: The etcd key prefix; API servers on other prefixes are other clusters.
        name: The cluster's name in the kubeconfig.
        binary: The kube-apiserver binary.
        extra_args: More kube-apiserver flags, appended last.
        service_account_issuer: The `iss` of the ServiceAccount tokens it issues (an
            EKS cluster's is its OIDC provider's URL); None: its own URL.
        parent_dir: Where to create its temporary folder (the system default if None).
        timeout: Seconds to wait for /readyz.

    Yields:
        The running API server. Its folder is removed once it has stopped.
    """
    if not binary.is_file():
        raise FileNotFoundError(f"{binary} is missing: run tools/build.sh kube_apiserver")
    workdir = Path(tempfile.mkdtemp(prefix="kube-apiserver-", dir=parent_dir))
    lifecycle: _Lifecycle | None = None
    try:
        pki = _PKI.generate(name)
        ca = _write(workdir / "ca.crt", pki.ca_cert)
        serving_cert = _write(workdir / "apiserver.crt", pki.serving_cert)
        serving_key = _write(workdir / "apiserver.key", pki.serving_key)
        client_cert = _write(workdir / "admin.crt", pki.admin_cert)
        client_key = _write(workdir / "admin.key", pki.admin_key)
        sa_key = _write(workdir / "sa.key", pki.service_account_key)
        sa_pub = _write(workdir / "sa.pub", pki.service_account_public_key)
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = free_port()
            url = f"https://{_LOOPBACK}:{port}"
            kubeconfig = _kubeconfig(name, url, pki)
            log_path = workdir / "kube-apiserver.log"
            server = APIServer(
                name=name,
                url=url,
                etcd_prefix=etcd_prefix,
                kubeconfig=kubeconfig,
                kubeconfig_path=_write(workdir / "kubeconfig", kubeconfig),
                ca_path=ca,
                client_cert_path=client_cert,
                client_key_path=client_key,
                log_path=log_path,
            )
            argv = [
                str(binary),
                f"--etcd-servers={etcd.url}",
                f"--etcd-prefix={etcd_prefix}",
                f"--bind-address={_LOOPBACK}",
                f"--advertise-address={_LOOPBACK}",
                # The endpoint reconcilers refuse a loopback advertise address, and
                # with no pod network nothing could reach the `kubernetes` Service
                # endpoints anyway.
                "--endpoint-reconciler-type=none",
                f"--secure-port={port}",
                f"--cert-dir={workdir}",
                f"--tls-cert-file={serving_cert}",
                f"--tls-private-key-file={serving_key}",
                f"--client-ca-file={ca}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                f"--service-account-issuer={service_account_issuer or url}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                # No controller-manager creates the `default` ServiceAccounts this
                # plugin would require of every pod.
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                "--profiling=false",
                *extra_args,
            ]
            lifecycle = _Lifecycle(argv, log_path, workdir, timeout)
            server = dataclasses.replace(server, lifecycle=lifecycle)
            try:
                lifecycle.start(server.ready)
            except StartError as error:
                lifecycle.stop()
                lifecycle = None
                if attempt == _PORT_ATTEMPTS or not _address_in_use(error):
                    raise
                continue
            yield server
            return
    finally:
        if lifecycle is not None:
            lifecycle.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class APIServerFactory:
    """Starts API servers sharing one etcd, each under its own prefix; `close` stops them."""

    def __init__(self, etcd: Etcd, *, parent_dir: Path | None = None) -> None:
        self._etcd = etcd
        self._parent_dir = parent_dir
        self._stack = contextlib.ExitStack()
        self._count = 0

    def __call__(
        self,
        etcd_prefix: str | None = None,
        *,
        name: str | None = None,
        extra_args: Sequence[str] = (),
        service_account_issuer: str | None = None,
    ) -> APIServer:
        """Start one more API server and return it once /readyz answers.

        Args:
            etcd_prefix: Its etcd key prefix; a new unique one if None.
            name: Its cluster name in the kubeconfig; derived from a counter if None.
            extra_args: More kube-apiserver flags.
            service_account_issuer: The `iss` of its ServiceAccount tokens; None: its URL.

        Returns:
            The running API server, stopped by `close`.
        """
        self._count += 1
        suffix = f"{self._count}-{uuid.uuid4().hex[:8]}"
        return self._stack.enter_context(
            run_apiserver(
                self._etcd,
                etcd_prefix=etcd_prefix or f"/cluster-{suffix}",
                name=name or f"kube-{suffix}",
                extra_args=extra_args,
                parent_dir=self._parent_dir,
                service_account_issuer=service_account_issuer,
            )
        )

    def close(self) -> None:
        """Stop every API server this factory started, newest first."""
        self._stack.close()

    def __enter__(self) -> Self:
        """Return the factory itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop every API server this factory started."""
        self.close()
