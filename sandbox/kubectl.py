"""`kubectl apply`, as a platform team installs things, with the kubectl tools/build.sh built."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandbox.apiserver import StartError
from sandbox.paths import TOOLS_BIN

KUBECTL_BIN = TOOLS_BIN / "kubectl"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    """Run kubectl against the cluster of `kubeconfig`; its output, or StartError with it."""
    if not KUBECTL_BIN.is_file():
        raise FileNotFoundError(f"{KUBECTL_BIN} is missing: run tools/build.sh kubectl")
    done = subprocess.run(
        [str(KUBECTL_BIN), f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise StartError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def apply(kubeconfig: Path, *paths: Path) -> None:
    """`kubectl apply --server-side -f` each file or folder."""
    for path in paths:
        kubectl(kubeconfig, "apply", "--server-side", "--field-manager=sandbox", "-f", str(path))


def apply_kustomization(kubeconfig: Path, folder: Path) -> None:
    """`kubectl apply --server-side -k` a kustomization folder, as an operator does."""
    kubectl(kubeconfig, "apply", "--server-side", "--field-manager=sandbox", "-k", str(folder))
