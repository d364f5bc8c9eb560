"""Crossplane core's own Helm chart, rendered as `helm install` renders it.

`tools/build.sh helm` copies the chart of the crossplane module tools/go.mod
pins (`cluster/charts/crossplane`, versioned as Crossplane's release
packages it) into `.tools/crossplane-core/chart` and builds `helm`. `render`
runs `helm template` with the values docs/install.md gives the chart
(`deploy/crossplane/values.yaml`), so the sandbox installs the very
ServiceAccounts, ClusterRoles and bindings a platform team's `helm install`
makes, and starts core and its RBAC manager with the arguments the chart's
Deployments give them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sandbox.apiserver import StartError
from sandbox.paths import REPO_ROOT, TOOLS, TOOLS_BIN

HELM_BIN = TOOLS_BIN / "helm"
CHART = TOOLS / "crossplane-core" / "chart"
VALUES = REPO_ROOT / "deploy" / "crossplane" / "values.yaml"
RELEASE = "crossplane"
# The chart's Deployments and their containers (templates/deployment.yaml,
# templates/rbac-manager-deployment.yaml).
CORE = ("crossplane", "crossplane")
CORE_INIT = ("crossplane", "crossplane-init")
RBAC_MANAGER = ("crossplane-rbac-manager", "crossplane")
# The ServiceAccounts those Deployments run as.
CORE_SERVICE_ACCOUNT = "crossplane"
RBAC_MANAGER_SERVICE_ACCOUNT = "rbac-manager"


@dataclass(frozen=True)
class Rendered:
    """The objects `helm template` rendered, in its order."""

    objects: tuple[dict[str, Any], ...]

    def args(self, deployment: str, container: str) -> list[str]:
        """The arguments the chart gives `container` of the Deployment `deployment`."""
        for obj in self.objects:
            if obj["kind"] == "Deployment" and obj["metadata"]["name"] == deployment:
                pod = obj["spec"]["template"]["spec"]
                for each in (*pod.get("initContainers", ()), *pod["containers"]):
                    if each["name"] == container:
                        return [str(arg) for arg in each.get("args") or []]
        raise KeyError(f"the chart renders no container {container} of Deployment {deployment}")

    def manifest(self) -> str:
        """Every rendered object as one YAML stream, for `kubectl apply`."""
        return yaml.safe_dump_all(self.objects, sort_keys=False)


@cache
def render(namespace: str, values: Path = VALUES) -> Rendered:
    """`helm template` of the chart into `namespace` with `values`."""
    for needed in (HELM_BIN, CHART / "Chart.yaml"):
        if not needed.is_file():
            raise FileNotFoundError(f"{needed} is missing: run tools/build.sh helm")
    done = subprocess.run(
        [
            str(HELM_BIN),
            "template",
            RELEASE,
            str(CHART),
            f"--namespace={namespace}",
            f"--values={values}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise StartError(f"helm template failed:\n{done.stdout}{done.stderr}")
    return Rendered(tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc))
