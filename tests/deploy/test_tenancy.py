"""deploy/tenancy and our CRDs' tenancy rules, against a real kube-apiserver (issue 27).

- Connection secrets are the provider's: a ValidatingAdmissionPolicy refuses a
  team that creates, changes (a controller reference of its own) or deletes one.
- No Kustomization outside flux-system is applied with kustomize-controller's
  own rights (cluster-admin, as Flux's install binds it): another policy
  refuses one that names neither a kubeconfig Secret nor a ServiceAccount.
- A team namespace holds a bounded number of Kustomizations (a ResourceQuota,
  counted by the real quota controller), so it cannot take every
  kustomize-controller worker of a Flux sized above it.
- The CRDs refuse what a terminal or a controller must never be handed: a
  Backup's instanceRef.name that is no DNS name, a ClusterProviderConfig whose
  Secret namespace is missing or empty.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.apiserver import APIServer, APIServerFactory, Etcd
from sandbox.controller_manager import CONTROLLERS, ControllerManager
from sandbox.flux import CRD_FOLDERS
from sandbox.spaces import Kube, wait_for
from tests.deploy.test_kustomize import KUBECTL, built
from tests.schemas import ROOT

TENANCY = ROOT / "deploy" / "tenancy"
TEAM = "team-a"
FLUX = "flux-system"
PROVIDER = "system:serviceaccount:crossplane-system:provider-controlplane"
TEAM_USER = "alice"
CONNECTION_TYPE = "connection.crossplane.io/v1alpha1"
QUOTA = 8


def _as(
    server: APIServer, user: str, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """kubectl as ``user`` (impersonated by the admin), against ``server``."""
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(server.kubeconfig_path), f"--as={user}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _admin(server: APIServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(server.kubeconfig_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _secret(name: str, type_: str = CONNECTION_TYPE, **metadata: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": TEAM, **metadata},
            "type": type_,
            "data": {"kubeconfig": "e30="},
        }
    )


@dataclass(frozen=True)
class BaseCase:
    reason: str
    folder: Path
    kinds: frozenset[str]


BASES = [
    BaseCase(
        "The cluster-wide base holds the connection-secret policy and its binding.",
        TENANCY,
        frozenset({"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}),
    ),
    BaseCase(
        "A team namespace's base holds its quota of Flux objects.",
        TENANCY / "team-namespace",
        frozenset({"ResourceQuota"}),
    ),
]


@pytest.mark.parametrize("case", BASES, ids=lambda case: case.reason)
def test_kubectl_kustomize_builds_the_tenancy_bases(case: BaseCase) -> None:
    assert {doc["kind"] for doc in built(str(case.folder.relative_to(ROOT)))} == case.kinds


@pytest.fixture(scope="module")
def policed(kube_etcd: Etcd) -> Iterator[APIServer]:
    """An API server with the policy, our CRDs, a team namespace, and RBAC that lets the
    team and the provider write Secrets there: what refuses them is the policy alone."""
    with APIServerFactory(kube_etcd) as factory:
        server = factory(name="tenancy")
        Kube(server).apply_crds(*CRD_FOLDERS)
        for source in (["-k", str(TENANCY)], ["-f", str(ROOT / "package" / "provider" / "crds")]):
            result = _admin(server, "apply", "--server-side", *source)
            assert result.returncode == 0, result.stderr
        result = _admin(
            server,
            "apply",
            "-f",
            str(ROOT / "deploy" / "backup-controller" / "crds"),
            "--server-side",
        )
        assert result.returncode == 0, result.stderr
        for namespace in (TEAM, FLUX):
            assert _admin(server, "create", "namespace", namespace).returncode == 0
        role = _admin(
            server,
            "create",
            "role",
            "secrets",
            "--verb=get,list,create,update,patch,delete",
            "--resource=secrets",
            "-n",
            TEAM,
        )
        assert role.returncode == 0, role.stderr
        for user in (TEAM_USER, PROVIDER):
            binding = _admin(
                server,
                "create",
                "rolebinding",
                f"secrets-{user.rsplit(':', 1)[-1]}",
                "--role=secrets",
                f"--user={user}",
                "-n",
                TEAM,
            )
            assert binding.returncode == 0, binding.stderr
        # The policy takes effect once the API server has loaded it: probe until a team's
        # connection secret is refused.
        wait_for(
            "the policy in force",
            lambda: (
                "written only by the provider"
                in _as(server, TEAM_USER, "create", "-f", "-", stdin=_secret("probe")).stderr
            ),
            60,
        )
        yield server


@dataclass(frozen=True)
class WriteCase:
    reason: str
    user: str
    # kubectl's arguments after the user; the secret "<xr>-kubeconfig" exists, the provider's.
    args: tuple[str, ...]
    stdin: str
    allowed: bool


WRITES = [
    WriteCase(
        "A team may not create a connection secret, for an Instance yet to come.",
        TEAM_USER,
        ("create", "-f", "-"),
        _secret("early-kubeconfig"),
        allowed=False,
    ),
    WriteCase(
        "A team may not give the provider's connection secret a controller of its own.",
        TEAM_USER,
        (
            "patch",
            "secret",
            "ctp-kubeconfig",
            "-n",
            TEAM,
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "metadata": {
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "name": "mine",
                                "uid": "00000000-0000-0000-0000-000000000001",
                                "controller": True,
                            }
                        ]
                    }
                }
            ),
        ),
        "",
        allowed=False,
    ),
    WriteCase(
        "A team may not rewrite the kubeconfig in it.",
        TEAM_USER,
        ("patch", "secret", "ctp-kubeconfig", "-n", TEAM, "--type=merge", "-p", '{"data":{}}'),
        "",
        allowed=False,
    ),
    WriteCase(
        "A team may not delete it, to make one of another type in its place.",
        TEAM_USER,
        ("delete", "secret", "ctp-kubeconfig", "-n", TEAM),
        "",
        allowed=False,
    ),
    WriteCase(
        "A team's own Secrets of other types are its own to write.",
        TEAM_USER,
        ("create", "-f", "-"),
        _secret("git-credentials", type_="Opaque"),
        allowed=True,
    ),
    WriteCase(
        "The provider writes connection secrets.",
        PROVIDER,
        ("patch", "secret", "ctp-kubeconfig", "-n", TEAM, "--type=merge", "-p", '{"data":{}}'),
        "",
        allowed=True,
    ),
]


@pytest.mark.parametrize("case", WRITES, ids=lambda case: case.reason)
def test_connection_secrets_are_written_only_by_the_provider(
    policed: APIServer, case: WriteCase
) -> None:
    made = _as(policed, PROVIDER, "apply", "-f", "-", stdin=_secret("ctp-kubeconfig"))
    assert made.returncode == 0, made.stderr
    result = _as(policed, case.user, *case.args, stdin=case.stdin)
    if case.allowed:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert "controlplane-connection-secrets" in result.stderr
        assert "written only by the provider" in result.stderr


@dataclass(frozen=True)
class KustomizationCase:
    reason: str
    namespace: str
    spec: dict[str, Any]
    allowed: bool


_KUBECONFIG = {"secretRef": {"name": "ctp-kubeconfig", "key": "kubeconfig"}}
KUSTOMIZATIONS = [
    KustomizationCase(
        "A Kustomization naming neither a kubeconfig nor an account would apply as Flux itself.",
        TEAM,
        {},
        allowed=False,
    ),
    KustomizationCase(
        "An empty serviceAccountName names no account: Flux would apply as itself.",
        TEAM,
        {"serviceAccountName": ""},
        allowed=False,
    ),
    KustomizationCase(
        "What the function renders applies through its namespace's kubeconfig Secret.",
        TEAM,
        {"kubeConfig": _KUBECONFIG},
        allowed=True,
    ),
    KustomizationCase(
        "One of the namespace's own ServiceAccounts is impersonated, with that account's rights.",
        TEAM,
        {"serviceAccountName": "deployer"},
        allowed=True,
    ),
    KustomizationCase(
        "flux-system is the platform's own: its Kustomizations are the operators' to write.",
        FLUX,
        {},
        allowed=True,
    ),
]


@pytest.mark.parametrize("case", KUSTOMIZATIONS, ids=lambda case: case.reason)
def test_no_kustomization_outside_flux_system_applies_with_fluxs_own_rights(
    policed: APIServer, case: KustomizationCase
) -> None:
    name = f"k{KUSTOMIZATIONS.index(case)}"
    result = _create_kustomization(policed, name, case.namespace, case.spec)
    if case.allowed:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert "controlplane-kustomization-identity" in result.stderr, result.stderr
        assert "spec.kubeConfig or spec.serviceAccountName is required" in result.stderr


@dataclass(frozen=True)
class SchemaCase:
    reason: str
    obj: dict[str, Any]
    refused: str  # a fragment of the API server's refusal


_BACKUP = {
    "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
    "kind": "Backup",
    "metadata": {"name": "b", "namespace": TEAM},
    "spec": {
        "instanceRef": {"name": "ctp\x1b[2Jx"},
        "storage": {"bucket": "bucket", "prefix": f"{TEAM}/ctp/", "region": "eu-west-1"},
    },
}


def _cluster_config(secret_ref: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "ClusterProviderConfig",
        "metadata": {"name": "default"},
        "spec": {"spaces": {"credentials": {"source": "Secret", "secretRef": secret_ref}}},
    }


SCHEMAS = [
    SchemaCase(
        "A Backup's instanceRef.name with an escape sequence is refused: it is printed by ls.",
        _BACKUP,
        "spec.instanceRef.name",
    ),
    SchemaCase(
        "A ClusterProviderConfig without its Secret's namespace is refused.",
        _cluster_config({"name": "space-kubeconfig", "key": "kubeconfig"}),
        "spec.spaces.credentials.secretRef.namespace: Required value",
    ),
    SchemaCase(
        "An empty namespace is refused as well: it would be the Instance's.",
        _cluster_config({"namespace": "", "name": "space-kubeconfig", "key": "kubeconfig"}),
        "spec.spaces.credentials.secretRef.namespace",
    ),
]


@pytest.mark.parametrize("case", SCHEMAS, ids=lambda case: case.reason)
def test_our_crds_refuse_what_no_team_or_operator_may_write(
    policed: APIServer, case: SchemaCase
) -> None:
    result = _admin(policed, "create", "-f", "-", stdin=json.dumps(case.obj))
    assert result.returncode != 0
    assert case.refused in result.stderr, result.stderr


def test_a_team_namespace_holds_no_more_kustomizations_than_its_quota(
    apiserver_factory: APIServerFactory, tmp_path: Path
) -> None:
    server = apiserver_factory()
    kube = Kube(server)
    kube.apply_crds(*CRD_FOLDERS)
    manager = ControllerManager(
        server, tmp_path, controllers=(*CONTROLLERS, "resourcequota-controller")
    )
    manager.start()
    try:
        kube.namespace(TEAM)
        result = _admin(server, "apply", "-k", str(TENANCY / "team-namespace"), "-n", TEAM)
        assert result.returncode == 0, result.stderr
        # The quota admits nothing until the quota controller has counted what there is.
        wait_for(
            "the quota counted",
            lambda: (
                "count/kustomizations.kustomize.toolkit.fluxcd.io"
                in (
                    yaml.safe_load(
                        _admin(server, "get", "resourcequota", "-n", TEAM, "-o", "yaml").stdout
                    )["items"][0]
                    .get("status", {})
                    .get("used", {})
                )
            ),
            60,
        )
        outcomes = [_create_kustomization(server, f"k{index}") for index in range(QUOTA + 1)]
    finally:
        manager.stop()
    assert all(result.returncode == 0 for result in outcomes[:QUOTA]), outcomes
    refused = outcomes[QUOTA]
    assert refused.returncode != 0
    assert "exceeded quota: controlplane-flux" in refused.stderr


def _create_kustomization(
    server: APIServer, name: str, namespace: str = TEAM, spec: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    body = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "interval": "10m",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": "ctp"},
            **(spec or {}),
        },
    }
    return _admin(server, "create", "-f", "-", stdin=json.dumps(body))
