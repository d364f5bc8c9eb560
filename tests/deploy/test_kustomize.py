"""The deploy/ kustomize bases build with the real kubectl and apply to a real API server."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest
import yaml

from sandbox.apiserver import APIServerFactory
from tests.schemas import ROOT

KUBECTL = ROOT / ".tools" / "bin" / "kubectl"


def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    if not KUBECTL.exists():
        msg = f"{KUBECTL} is missing: build it with tools/build.sh (make test does)"
        raise FileNotFoundError(msg)
    return subprocess.run(
        [str(KUBECTL), *args], capture_output=True, text=True, timeout=120, check=False
    )


@dataclass(frozen=True)
class BaseCase:
    reason: str
    folder: str
    kinds: frozenset[str]


BASES = [
    BaseCase(
        "The Backup controller's base holds its CRDs, workload, identity and least RBAC.",
        "deploy/backup-controller",
        frozenset(
            {
                "CustomResourceDefinition",
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Deployment",
            }
        ),
    ),
    BaseCase(
        "The provider's extra base lets it read Backups for restores.",
        "deploy/provider",
        frozenset({"DeploymentRuntimeConfig", "ClusterRole", "ClusterRoleBinding"}),
    ),
]


@pytest.mark.parametrize("case", BASES, ids=lambda case: case.reason)
def test_kubectl_kustomize_builds_the_base(case: BaseCase) -> None:
    result = kubectl("kustomize", str(ROOT / case.folder))
    assert result.returncode == 0, result.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(result.stdout) if doc}
    assert kinds == case.kinds


def test_the_backup_controller_base_applies_to_a_real_api_server(
    apiserver_factory: APIServerFactory,
) -> None:
    server = apiserver_factory(name="deploy")
    kubeconfig = ["--kubeconfig", str(server.kubeconfig_path)]
    result = kubectl(
        "apply", "--server-side", "-k", str(ROOT / "deploy" / "backup-controller"), *kubeconfig
    )
    assert result.returncode == 0, result.stderr
    shown = kubectl(
        "get", "deployment,serviceaccount", "-n", "controlplane-system", "-o", "yaml", *kubeconfig
    )
    assert shown.returncode == 0, shown.stderr
    items = yaml.safe_load(shown.stdout)["items"]
    account = next(i for i in items if i["kind"] == "ServiceAccount")
    assert "eks.amazonaws.com/role-arn" in account["metadata"]["annotations"]
    deployment = next(i for i in items if i["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    can_list_secrets = kubectl(
        "auth",
        "can-i",
        "list",
        "secrets",
        "--as=system:serviceaccount:controlplane-system:controlplane-backup",
        *kubeconfig,
    )
    assert can_list_secrets.stdout.strip() == "no", "the controller gets secrets, never lists them"
    can_get_secrets = kubectl(
        "auth",
        "can-i",
        "get",
        "secrets",
        "--as=system:serviceaccount:controlplane-system:controlplane-backup",
        *kubeconfig,
    )
    assert can_get_secrets.stdout.strip() == "yes"
