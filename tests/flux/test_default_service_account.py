"""Flux's --default-service-account reaches through a Kustomization's kubeconfig, against the real
kustomize-controller.

Flux's multi-tenancy lockdown sets ``--default-service-account`` so that a
Kustomization without ``serviceAccountName`` impersonates that account of its
namespace. The pinned kustomize-controller sets the same impersonation on the
client it builds from ``spec.kubeConfig`` (fluxcd/pkg
``runtime/client/impersonator.go``, ``clientForKubeConfig``), so every stage the
function renders would be applied *inside the hosted control plane* as
``system:serviceaccount:<team>:<account>``, which the control plane's token
may not impersonate. That is why the platform does not set the flag and
deploy/tenancy refuses Kustomizations that name no identity instead
(docs/security.md, "Flux under its own RBAC").

The "hosted control plane" here is the same API server, reached through a
kubeconfig Secret holding the token of an account that may write ConfigMaps
and nothing more: like a control plane's token, it cannot impersonate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sandbox import identity
from sandbox.spaces import condition, wait_for

from .conftest import TARGET_NAMESPACE, FluxWorld, build_outcome, configmap

APPLY_DEADLINE = 90.0
TEAM = "team-a"
# The account whose token the kubeconfig Secret holds: ConfigMaps only.
TOKEN_ACCOUNT = identity.ServiceAccount(TARGET_NAMESPACE, "control-plane-token")
TOKEN_NS = TOKEN_ACCOUNT.namespace
RBAC_GROUP = "rbac.authorization.k8s.io"


def _token_kubeconfig(world: FluxWorld, path: Path) -> str:
    """A kubeconfig of the cluster as TOKEN_ACCOUNT, allowed ConfigMaps in TARGET_NAMESPACE."""
    world.kube.core.create_namespaced_service_account(
        TARGET_NAMESPACE, {"metadata": {"name": TOKEN_ACCOUNT.name}}
    )
    rbac: Any = client.RbacAuthorizationV1Api(world.kube.api)
    rbac.create_namespaced_role(
        TARGET_NAMESPACE,
        {
            "metadata": {"name": "configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        TARGET_NAMESPACE,
        {
            "metadata": {"name": "configmaps"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "configmaps",
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": TOKEN_ACCOUNT.name,
                    "namespace": TARGET_NAMESPACE,
                }
            ],
        },
    )
    return identity.kubeconfig(world.server, TOKEN_ACCOUNT, path).read_text()


@dataclass(frozen=True)
class LockdownCase:
    reason: str
    kustomize_flags: tuple[str, ...]
    applied: bool
    # A fragment of the stage's Ready message when it is refused.
    refused: str = ""


CASES = [
    LockdownCase(
        "Without --default-service-account a stage applies as the kubeconfig's own token.",
        (),
        applied=True,
    ),
    LockdownCase(
        "With it, the stage impersonates the team's account inside the remote cluster, "
        "which the token may not do, so nothing is applied.",
        ("--default-service-account=flux-stages",),
        applied=False,
        # The token may not impersonate: the controller's very discovery is refused.
        refused="dry-run failed (Forbidden): failed to get server groups",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_the_default_service_account_is_impersonated_through_a_kubeconfig_too(
    flux_world: Callable[..., FluxWorld], tmp_path: Path, case: LockdownCase
) -> None:
    world = flux_world(kustomize_flags=case.kustomize_flags)
    world.kube.namespace(TEAM)
    kubeconfig = _token_kubeconfig(world, tmp_path / "token.kubeconfig")
    world.kube.put_secret(TEAM, "ctp-kubeconfig", {"kubeconfig": kubeconfig.encode()})
    repository = world.repository(TEAM, {"cm.yaml": configmap("from-the-stage")})
    world.apply(world.compose(TEAM, {"url": repository.url, "interval": "10s"}))

    ready = wait_for(
        "the stage's outcome",
        lambda: build_outcome(condition(world.kustomization(TEAM, "ctp"), "Ready")),
        APPLY_DEADLINE,
    )
    names = {
        item.metadata.name
        for item in world.kube.core.list_namespaced_config_map(TARGET_NAMESPACE).items
    }
    assert ("from-the-stage" in names) == case.applied, (case.reason, ready)
    if case.applied:
        assert ready["status"] == "True", ready
    else:
        assert ready["status"] == "False", ready
        assert case.refused in ready["message"], ready
