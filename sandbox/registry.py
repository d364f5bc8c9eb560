"""A loopback OCI registry (`crane registry serve`) and the packages pushed into it.

The packages keep their production names (`xpkg.acme.io/acme/...`, and
`xpkg.upbound.io/upbound/...` for provider-aws: `sandbox.provideraws`); an
ImageConfig per prefix rewrites it to the loopback registry, so what is
installed, dependencies resolved by Crossplane's package manager included,
is what a platform team installs. go-containerregistry speaks plain HTTP to
a registry on 127.x by itself.
"""

from __future__ import annotations

import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.apiserver import StartError, free_port
from sandbox.paths import REPO_ROOT, TOOLS_BIN
from sandbox.processes import Process

CRANE_BIN = TOOLS_BIN / "crane"
CROSSPLANE_BIN = TOOLS_BIN / "crossplane"
PRODUCTION_PREFIX = "xpkg.acme.io/acme/"
PACKAGE_VERSION = "v0.1.0"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Package:
    """A package to build: the folder holding its crossplane.yaml, its name and where it lives."""

    root: Path
    name: str
    prefix: str = PRODUCTION_PREFIX
    version: str = PACKAGE_VERSION

    @property
    def repository(self) -> str:
        """Its production repository, as a dependsOn names it."""
        return f"{self.prefix}{self.name}"

    @property
    def reference(self) -> str:
        """Its production reference, as docs/install.md installs it."""
        return f"{self.repository}:{self.version}"

    @property
    def path(self) -> str:
        """Its repository's path below the registry's host (`acme/function-controlplane`)."""
        return self.repository.split("/", 1)[1]


FUNCTION = Package(REPO_ROOT / "package" / "function", "function-controlplane")
PROVIDER = Package(REPO_ROOT / "package" / "provider", "provider-controlplane")
CONFIGURATION_NAME = "configuration-controlplane"


@dataclass
class Registry:
    """`crane registry serve` on a loopback port, blobs on disk."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: Process | None = None

    @property
    def host(self) -> str:
        """host:port of the registry."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the registry and wait until it answers /v2/."""
        if not CRANE_BIN.is_file():
            raise FileNotFoundError(f"{CRANE_BIN} is missing: run tools/build.sh crane")
        blobs = self.workdir / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        self.process = Process(
            "registry",
            [str(CRANE_BIN), "registry", "serve", f"--address={self.host}", f"--disk={blobs}"],
            self.workdir / "registry.log",
        )
        self.process.start(self._ready)

    def stop(self) -> None:
        """Stop the registry."""
        if self.process is not None:
            self.process.stop()

    def push(self, package: Package) -> str:
        """Build the package with `crossplane xpkg build` and push it; its loopback reference."""
        output = self.workdir / f"{package.name}.xpkg"
        reference = f"{self.host}/{package.path}:{package.version}"
        _crossplane(
            "xpkg",
            "build",
            "--package-root",
            str(package.root),
            "--examples-root",
            str(self.workdir / "no-examples"),
            "--package-file",
            str(output),
        )
        _crossplane("xpkg", "push", "-f", str(output), reference)
        return reference

    def withdraw(self, reference: str) -> None:
        """Delete the tag ``reference`` (as ``push`` returned it): it can no longer be pulled."""
        done = subprocess.run(
            [str(CRANE_BIN), "delete", reference],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise StartError(f"crane delete {reference} failed:\n{done.stdout}{done.stderr}")

    def image_config(self, prefix: str = PRODUCTION_PREFIX) -> dict[str, Any]:
        """The ImageConfig that sends the package names under `prefix` to this registry."""
        host, path = prefix.split("/", 1)
        return {
            "apiVersion": "pkg.crossplane.io/v1beta1",
            "kind": "ImageConfig",
            "metadata": {"name": f"loopback-{host.replace('.', '-')}"},
            "spec": {
                "matchImages": [{"type": "Prefix", "prefix": prefix}],
                "rewriteImage": {"prefix": f"{self.host}/{path}"},
            },
        }

    def _ready(self) -> bool:
        try:
            with _NO_PROXY.open(f"http://{self.host}/v2/", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def _crossplane(*args: str) -> None:
    if not CROSSPLANE_BIN.is_file():
        raise FileNotFoundError(f"{CROSSPLANE_BIN} is missing: run tools/build.sh crossplane")
    done = subprocess.run(
        [str(CROSSPLANE_BIN), *args], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise StartError(f"crossplane {' '.join(args[:2])} failed:\n{done.stdout}{done.stderr}")
