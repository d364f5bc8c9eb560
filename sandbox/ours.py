"""Our own processes in the platform: the function (TLS), the provider, the backup controller.

Each is launched through a `Launcher`, the one place that knows where our
programs come from (the development virtualenv, or the images' root file
systems). The files they read (certificates, kubeconfig) are given as paths,
so an image gets them bound in.
"""

from __future__ import annotations

import socket
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.apiserver import free_port
from sandbox.launcher import Argument, Launcher
from sandbox.pki import KeyPair
from sandbox.processes import Process

_LOOPBACK = "127.0.0.1"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((_LOOPBACK, port)) == 0


def _ready(port: int) -> bool:
    try:
        with _NO_PROXY.open(f"http://{_LOOPBACK}:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _process(
    launcher: Launcher,
    program: str,
    args: list[Argument],
    workdir: Path,
    env: dict[str, str],
    *,
    files: dict[str, Path] | None = None,
) -> Process:
    command = launcher.command(program, *args, files=files)
    return command.process(program, workdir / f"{program}.log", env)


@dataclass
class FunctionServer:
    """`function-controlplane serve` with mTLS: its certificate and its clients' from core's CA."""

    launcher: Launcher
    workdir: Path
    certs: KeyPair
    ca: bytes
    port: int = field(default_factory=free_port)
    process: Process | None = None

    @property
    def endpoint(self) -> str:
        """host:port, as the FunctionRevision's status.endpoint."""
        return f"{_LOOPBACK}:{self.port}"

    def start(self) -> None:
        """Write its certificates and start it; wait until it listens."""
        certs = self.workdir / "function-tls"
        certs.mkdir(parents=True, exist_ok=True)
        for name, data in (
            ("tls.crt", self.certs.cert),
            ("tls.key", self.certs.key),
            ("ca.crt", self.ca),
        ):
            path = certs / name
            path.touch(mode=0o600)
            path.write_bytes(data)
        self.process = _process(
            self.launcher,
            "function-controlplane",
            ["serve", "--tls-certs-dir", certs, "--address", self.endpoint],
            self.workdir,
            {},
        )
        self.process.start(lambda: _listening(self.port))

    def stop(self) -> None:
        """Stop it (start starts it again on the same port)."""
        if self.process is not None:
            self.process.stop()


@dataclass
class Controller:
    """`controlplane-provider` or `controlplane-backup-controller` against one cluster."""

    launcher: Launcher
    workdir: Path
    program: str
    kubeconfig: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # Variables naming a file it reads (a projected token), bound into an image.
    files: dict[str, Path] = field(default_factory=dict)
    metrics_port: int = field(default_factory=free_port)
    process: Process | None = None

    def start(self) -> None:
        """Start it; wait until /readyz answers."""
        self.process = _process(
            self.launcher,
            self.program,
            [
                "--kubeconfig",
                self.kubeconfig,
                "--metrics-bind-address",
                f"{_LOOPBACK}:{self.metrics_port}",
                *self.args,
            ],
            self.workdir,
            self.env,
            files=self.files,
        )
        self.process.start(lambda: _ready(self.metrics_port))

    def stop(self) -> None:
        """Stop it: SIGTERM, as Kubernetes does."""
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything."""
        if self.process is not None:
            self.process.kill()
