"""The deploy/ kustomize bases build with the real kubectl and apply to a real API server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from sandbox.apiserver import APIServerFactory, Etcd
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
        "Crossplane core's extra base holds its one aggregated ClusterRole.",
        "deploy/crossplane",
        frozenset({"ClusterRole"}),
    ),
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
                "NetworkPolicy",
            }
        ),
    ),
    BaseCase(
        "The provider's extra base lets it read Backups and mint the backup controller's "
        "web identity tokens for restores.",
        "deploy/provider",
        frozenset(
            {
                "DeploymentRuntimeConfig",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "NetworkPolicy",
            }
        ),
    ),
]


def built(folder: str) -> list[dict[str, Any]]:
    result = kubectl("kustomize", str(ROOT / folder))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


# Each rule of a policy as (its peers, its ports): a peer is "any" (no peer: every
# source or destination), "ipBlock <cidr>", or the namespace and pod labels it selects.
Rule = tuple[frozenset[str], frozenset[tuple[str, int]]]

DNS: Rule = (
    frozenset({"namespace kubernetes.io/metadata.name=kube-system, pods k8s-app=kube-dns"}),
    frozenset({("UDP", 53), ("TCP", 53)}),
)
MONITORING: Rule = (
    frozenset({"namespace kubernetes.io/metadata.name=monitoring, pods any"}),
    frozenset({("TCP", 8080)}),
)
# RFC 5737's documentation ranges: an overlay replaces each with its addresses.
API_SERVER: Rule = (frozenset({"ipBlock 192.0.2.0/24"}), frozenset({("TCP", 443), ("TCP", 6443)}))
S3_AND_STS: Rule = (frozenset({"ipBlock 203.0.113.0/24"}), frozenset({("TCP", 443)}))


def _labels(selector: dict[str, Any] | None) -> str:
    labels = (selector or {}).get("matchLabels") or {}
    assert not (selector or {}).get("matchExpressions"), "selected by labels only"
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items())) or "any"


def _peer(peer: dict[str, Any]) -> str:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        excepted = f" except {block['except']}" if "except" in block else ""
        return f"ipBlock {block['cidr']}{excepted}"
    namespace = _labels(peer.get("namespaceSelector")) if "namespaceSelector" in peer else "own"
    return f"namespace {namespace}, pods {_labels(peer.get('podSelector'))}"


def rules(policy: dict[str, Any], direction: str) -> list[Rule]:
    """The policy's ingress or egress rules, as (peers, ports)."""
    peers_key = "from" if direction == "ingress" else "to"
    return [
        (
            frozenset(_peer(peer) for peer in rule.get(peers_key) or []) or frozenset({"any"}),
            frozenset((p["protocol"], p["port"]) for p in rule.get("ports") or []),
        )
        for rule in policy["spec"].get(direction) or []
    ]


@dataclass(frozen=True)
class PolicyCase:
    reason: str
    folder: str
    # Where the controller's pod labels are set, as (kind, path to the labels).
    workload: tuple[str, tuple[str, ...]]
    egress: list[Rule]


POLICIES = [
    PolicyCase(
        "The Backup controller reaches kube-dns, the API server, the hosted control planes, "
        "and S3 and STS, and takes metrics only from the monitoring namespace.",
        "deploy/backup-controller",
        ("Deployment", ("spec", "template", "metadata", "labels")),
        [
            DNS,
            API_SERVER,
            (frozenset({"ipBlock 198.51.100.0/24"}), frozenset({("TCP", 443)})),
            S3_AND_STS,
        ],
    ),
    PolicyCase(
        "The provider's pods (labelled by its runtime config) reach kube-dns, the API server, "
        "the Spaces, and S3 and STS for restores, and take metrics only from monitoring.",
        "deploy/provider",
        (
            "DeploymentRuntimeConfig",
            ("spec", "deploymentTemplate", "spec", "template", "metadata", "labels"),
        ),
        [
            DNS,
            API_SERVER,
            (frozenset({"ipBlock 198.51.100.0/24"}), frozenset({("TCP", 443), ("TCP", 6443)})),
            S3_AND_STS,
        ],
    ),
]


def _policy(case: PolicyCase) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    docs = built(case.folder)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    return policy, docs


@pytest.mark.parametrize("case", POLICIES, ids=lambda case: case.reason)
def test_a_network_policy_selects_the_controllers_pods_both_ways(case: PolicyCase) -> None:
    policy, docs = _policy(case)
    kind, path = case.workload
    (workload,) = [d for d in docs if d["kind"] == kind]
    labels = workload
    for key in path:
        labels = labels[key]
    spec = policy["spec"]
    selected = spec["podSelector"]["matchLabels"]
    assert selected.items() <= labels.items(), "the policy selects the controller's pods"
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}


@pytest.mark.parametrize("case", POLICIES, ids=lambda case: case.reason)
def test_metrics_are_taken_only_from_the_monitoring_namespace(case: PolicyCase) -> None:
    policy, _ = _policy(case)
    ingress = rules(policy, "ingress")
    assert ingress == [MONITORING]
    for peers, ports in ingress:
        assert "any" not in peers, f"every source may reach {sorted(ports)}"
        assert not any(peer.startswith("ipBlock") for peer in peers)


@pytest.mark.parametrize("case", POLICIES, ids=lambda case: case.reason)
def test_egress_goes_only_to_the_narrowed_destinations(case: PolicyCase) -> None:
    policy, _ = _policy(case)
    egress = rules(policy, "egress")
    assert egress == case.egress
    for peers, ports in egress:
        assert "any" not in peers, f"every destination is allowed on {sorted(ports)}"
        assert ports, "every port is allowed"
        assert not any(peer.startswith(("ipBlock 0.0.0.0/", "ipBlock ::/")) for peer in peers)
        if ("UDP", 53) in ports:
            assert peers == DNS[0], "DNS only to kube-dns"


@pytest.mark.parametrize("case", BASES, ids=lambda case: case.reason)
def test_kubectl_kustomize_builds_the_base(case: BaseCase) -> None:
    result = kubectl("kustomize", str(ROOT / case.folder))
    assert result.returncode == 0, result.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(result.stdout) if doc}
    assert kinds == case.kinds


@pytest.fixture(scope="module")
def applied(kube_etcd: Etcd) -> Iterator[list[str]]:
    """A real API server with the Backup controller's base and the provider's RBAC applied.

    The provider's whole base holds a DeploymentRuntimeConfig, which needs
    Crossplane's CRDs: its RBAC is applied alone. Yields kubectl's --kubeconfig.
    """
    with APIServerFactory(kube_etcd) as factory:
        server = factory(name="deploy")
        kubeconfig = ["--kubeconfig", str(server.kubeconfig_path)]
        for source in (
            ["-k", str(ROOT / "deploy" / "backup-controller")],
            ["-f", str(ROOT / "deploy" / "provider" / "rbac.yaml")],
            # The provider's kinds, which the backup controller reads, served for can-i.
            ["-f", str(ROOT / "package" / "provider" / "crds")],
        ):
            result = kubectl("apply", "--server-side", *source, *kubeconfig)
            assert result.returncode == 0, result.stderr
        established = kubectl(
            "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", *kubeconfig
        )
        assert established.returncode == 0, established.stderr
        yield kubeconfig


def test_the_backup_controller_base_applies_to_a_real_api_server(applied: list[str]) -> None:
    shown = kubectl(
        "get", "deployment,serviceaccount", "-n", "controlplane-system", "-o", "yaml", *applied
    )
    assert shown.returncode == 0, shown.stderr
    items = yaml.safe_load(shown.stdout)["items"]
    account = next(i for i in items if i["kind"] == "ServiceAccount")
    assert "eks.amazonaws.com/role-arn" in account["metadata"]["annotations"]
    deployment = next(i for i in items if i["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


BACKUP_CONTROLLER = "system:serviceaccount:controlplane-system:controlplane-backup"
PROVIDER = "system:serviceaccount:crossplane-system:provider-controlplane"


@dataclass(frozen=True)
class AccessCase:
    reason: str
    user: str
    # kubectl auth can-i's arguments: verb, resource, and any flags.
    ask: tuple[str, ...]
    allowed: bool


ACCESS_CASES = [
    AccessCase(
        "The Backup controller gets secrets, never lists them.",
        BACKUP_CONTROLLER,
        ("list", "secrets"),
        allowed=False,
    ),
    AccessCase(
        "The Backup controller gets the Instances' connection secrets.",
        BACKUP_CONTROLLER,
        ("get", "secrets"),
        allowed=True,
    ),
    AccessCase(
        "The Backup controller watches no secrets.",
        BACKUP_CONTROLLER,
        ("watch", "secrets"),
        allowed=False,
    ),
    AccessCase(
        "The Backup controller never writes a secret.",
        BACKUP_CONTROLLER,
        ("update", "secrets"),
        allowed=False,
    ),
    AccessCase(
        "The Backup controller reads the provider config that names an Instance's Space.",
        BACKUP_CONTROLLER,
        ("get", "clusterproviderconfigs.controlplane.spaces.upbound.io"),
        allowed=True,
    ),
    AccessCase(
        "The Backup controller reads a namespaced provider config too.",
        BACKUP_CONTROLLER,
        ("get", "providerconfigs.controlplane.spaces.upbound.io", "-n", "team-a"),
        allowed=True,
    ),
    AccessCase(
        "The Backup controller never changes a provider config.",
        BACKUP_CONTROLLER,
        ("update", "clusterproviderconfigs.controlplane.spaces.upbound.io"),
        allowed=False,
    ),
    AccessCase(
        "The provider deletes an Instance's ClusterProviderConfigUsage when it lets go of it.",
        PROVIDER,
        ("delete", "clusterproviderconfigusages.controlplane.spaces.upbound.io"),
        allowed=True,
    ),
    AccessCase(
        "The provider deletes a namespaced ProviderConfigUsage likewise.",
        PROVIDER,
        ("delete", "providerconfigusages.controlplane.spaces.upbound.io", "-n", "team-a"),
        allowed=True,
    ),
    AccessCase(
        "deploy/ lets the provider delete no provider config itself.",
        PROVIDER,
        ("delete", "clusterproviderconfigs.controlplane.spaces.upbound.io"),
        allowed=False,
    ),
    AccessCase(
        "The provider mints tokens of the backup controller's ServiceAccount for restores.",
        PROVIDER,
        (
            "create",
            "serviceaccounts/controlplane-backup",
            "--subresource=token",
            "-n",
            "controlplane-system",
        ),
        allowed=True,
    ),
    AccessCase(
        "The provider mints no token of any other ServiceAccount of that namespace.",
        PROVIDER,
        ("create", "serviceaccounts/default", "--subresource=token", "-n", "controlplane-system"),
        allowed=False,
    ),
    AccessCase(
        "The provider mints no token of a ServiceAccount of that name elsewhere.",
        PROVIDER,
        ("create", "serviceaccounts/controlplane-backup", "--subresource=token", "-n", "default"),
        allowed=False,
    ),
    AccessCase(
        "The provider reads the backup controller's ServiceAccount: its IRSA role's account "
        "is the one a WebIdentity restore may name by default.",
        PROVIDER,
        ("get", "serviceaccounts/controlplane-backup", "-n", "controlplane-system"),
        allowed=True,
    ),
    AccessCase(
        "The provider reads no other ServiceAccount of that namespace, nor lists them.",
        PROVIDER,
        ("list", "serviceaccounts", "-n", "controlplane-system"),
        allowed=False,
    ),
    AccessCase(
        "The provider may not change the backup controller's ServiceAccount itself.",
        PROVIDER,
        ("update", "serviceaccounts/controlplane-backup", "-n", "controlplane-system"),
        allowed=False,
    ),
    AccessCase(
        "The provider reads no secret of the backup controller's namespace.",
        PROVIDER,
        ("get", "secrets", "-n", "controlplane-system"),
        allowed=False,
    ),
]


@pytest.mark.parametrize("case", ACCESS_CASES, ids=lambda case: case.reason)
def test_the_shipped_rbac_grants_each_controller_only_what_it_needs(
    case: AccessCase, applied: list[str]
) -> None:
    answer = kubectl("auth", "can-i", *case.ask, f"--as={case.user}", *applied)
    assert answer.stdout.strip() == ("yes" if case.allowed else "no"), (
        case.reason,
        answer.stdout,
        answer.stderr,
    )


CORE_RULES = [
    {
        "apiGroups": ["source.toolkit.fluxcd.io"],
        "resources": ["gitrepositories"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["kustomize.toolkit.fluxcd.io"],
        "resources": ["kustomizations"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["controlplane.spaces.upbound.io"],
        "resources": ["backupschedules"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["controlplane.spaces.upbound.io"],
        "resources": ["backups"],
        "verbs": ["get", "list", "watch"],
    },
]


def test_core_gets_exactly_the_kinds_the_function_composes_or_requires_from_us() -> None:
    # Crossplane's chart aggregates every ClusterRole with this label into core's
    # own; its rules and the RBAC manager's cover the rest (Usages, the Instance,
    # provider-aws's kinds, the XRDs'). Composed: Flux's GitRepository and
    # Kustomization, the BackupSchedule; required, read only: Backups.
    aggregated = [
        doc
        for folder in ("deploy/crossplane", "deploy/backup-controller", "deploy/provider")
        for doc in built(folder)
        if doc["kind"] == "ClusterRole"
        and (doc["metadata"].get("labels") or {}).get("rbac.crossplane.io/aggregate-to-crossplane")
        == "true"
    ]
    assert [role["metadata"]["name"] for role in aggregated] == ["crossplane:controlplane"]
    assert aggregated[0]["rules"] == CORE_RULES
