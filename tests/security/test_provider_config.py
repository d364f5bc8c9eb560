"""Where a provider config's Space kubeconfig is read from: never a team's Secret for a
cluster-scoped config (issue 27)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.model import InvalidError, SecretKeySelector, credentials_namespace


@dataclass(frozen=True)
class NamespaceCase:
    reason: str
    kind: str
    secret_namespace: str | None
    want: str  # the namespace read, or a fragment of the refusal


NAMESPACE_CASES = [
    NamespaceCase(
        "A ClusterProviderConfig reads the operator's namespace it names.",
        "ClusterProviderConfig",
        "controlplane-system",
        "controlplane-system",
    ),
    NamespaceCase(
        "A ClusterProviderConfig without a namespace is refused, never read from the "
        "Instance's (team's) namespace.",
        "ClusterProviderConfig",
        None,
        "secretRef.namespace is required",
    ),
    NamespaceCase(
        "An empty namespace is no namespace.",
        "ClusterProviderConfig",
        "",
        "secretRef.namespace is required",
    ),
    NamespaceCase(
        "A ProviderConfig reads its own namespace by default.", "ProviderConfig", None, "team-a"
    ),
    NamespaceCase(
        "A ProviderConfig may name its own namespace.", "ProviderConfig", "team-a", "team-a"
    ),
    NamespaceCase(
        "A ProviderConfig may not read another namespace's Secret.",
        "ProviderConfig",
        "controlplane-system",
        "must be 'team-a', its own namespace",
    ),
]


@pytest.mark.parametrize("case", NAMESPACE_CASES, ids=lambda case: case.reason)
def test_a_provider_configs_secret_namespace_is_never_a_teams_for_a_cluster_config(
    case: NamespaceCase,
) -> None:
    selector = SecretKeySelector(namespace=case.secret_namespace, name="space-kubeconfig")
    if case.want.startswith(("secretRef", "must")):
        with pytest.raises(InvalidError) as refused:
            credentials_namespace(case.kind, "default", selector, "team-a")
        assert case.want in str(refused.value)
        assert f"{case.kind} default" in str(refused.value)
    else:
        assert credentials_namespace(case.kind, "default", selector, "team-a") == case.want
