"""The install, step by step: what docs/install.md tells a platform team to apply, in order.

One list for both: the sandbox applies these steps (`Platform`), and the
guide's test holds docs/install.md's commands to them and the sandbox's
cluster to the objects they make (tests/deploy/test_install_guide.py,
tests/system/test_install.py). Flux, the Space and the AWS account are
prerequisites the guide lists before these steps; what the sandbox plays
for them (its own Flux controllers, the simulated Space, the AWS stand-in)
is not part of the list.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from sandbox import chart
from sandbox.apiserver import StartError
from sandbox.kubectl import KUBECTL_BIN
from sandbox.paths import REPO_ROOT

NAMESPACE = "crossplane-system"
SPACE_SECRET = "space-kubeconfig"
_CROSSPLANE_PIN = re.compile(r"^\s*github\.com/crossplane/crossplane/v2 v(\S+)", re.MULTILINE)


def crossplane_version() -> str:
    """The Crossplane release tools/go.mod pins (its chart's version)."""
    found = _CROSSPLANE_PIN.search((REPO_ROOT / "tools" / "go.mod").read_text())
    if found is None:
        raise ValueError("tools/go.mod pins no github.com/crossplane/crossplane/v2")
    return found.group(1)


class How(Enum):
    """How a step is applied."""

    HELM = "helm"
    KUSTOMIZE = "kustomize"
    FILE = "file"
    SECRET = "secret"


@dataclass(frozen=True)
class Step:
    """One install step: its name, how it is applied, and what (relative to the repository)."""

    name: str
    how: How
    path: str

    @property
    def command(self) -> str:
        """The command docs/install.md gives for it."""
        match self.how:
            case How.HELM:
                return (
                    f"helm install crossplane crossplane-stable/crossplane "
                    f"--version {crossplane_version()} --namespace {NAMESPACE} "
                    f"--create-namespace --values {self.path}"
                )
            case How.KUSTOMIZE:
                return f"kubectl apply -k {self.path}"
            case How.FILE:
                return f"kubectl apply -f {self.path}"
            case How.SECRET:
                return (
                    f"kubectl -n {NAMESPACE} create secret generic {SPACE_SECRET} "
                    f"--from-file=kubeconfig={self.path}"
                )


STEPS = (
    Step("crossplane", How.HELM, "deploy/crossplane/values.yaml"),
    Step("crossplane-rules", How.KUSTOMIZE, "deploy/crossplane"),
    Step("tenancy", How.KUSTOMIZE, "deploy/tenancy"),
    Step("backup-controller", How.KUSTOMIZE, "deploy/backup-controller"),
    Step("provider-runtime", How.KUSTOMIZE, "deploy/provider"),
    Step("packages", How.KUSTOMIZE, "deploy/packages"),
    Step("configuration", How.KUSTOMIZE, "deploy/configuration"),
    # The operator's own file: its name in the guide, never one of the repository's.
    Step("space-kubeconfig", How.SECRET, "space.kubeconfig"),
    Step("provider-config", How.FILE, "examples/provider/clusterproviderconfig.yaml"),
)
BY_NAME = {step.name: step for step in STEPS}


def _kustomize(folder: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(KUBECTL_BIN), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise StartError(f"kubectl kustomize {folder} failed:\n{done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def manifests(step: Step) -> list[dict[str, Any]]:
    """The objects `step` applies, as the guide's command makes them."""
    match step.how:
        case How.HELM:
            return list(chart.render(NAMESPACE, REPO_ROOT / step.path).objects)
        case How.KUSTOMIZE:
            return _kustomize(REPO_ROOT / step.path)
        case How.FILE:
            text = (REPO_ROOT / step.path).read_text()
            return [doc for doc in yaml.safe_load_all(text) if doc]
        case How.SECRET:
            return [
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": SPACE_SECRET, "namespace": NAMESPACE},
                }
            ]


@dataclass(frozen=True, order=True)
class ObjectRef:
    """Which object: its apiVersion, kind, namespace (empty if none) and name."""

    api_version: str
    kind: str
    namespace: str
    name: str


def refs(objects: list[dict[str, Any]]) -> list[ObjectRef]:
    """The objects' references, sorted."""
    return sorted(
        ObjectRef(
            obj["apiVersion"],
            obj["kind"],
            obj["metadata"].get("namespace") or "",
            obj["metadata"]["name"],
        )
        for obj in objects
    )
