"""A stage the hosted control plane's RBAC refuses, shown on the composite (issue 26 item 7).

The Space's front sends a control plane's requests on as its connection
token's user, whose role there is Upbound's controlplane-admin equivalent:
RBAC and CustomResourceDefinitions are read-only (sandbox.token_role). A team
whose repository holds a ClusterRoleBinding sees Flux's refusal on the
composite's SourceSynced, and the rest of the control plane keeps working.
"""

from __future__ import annotations

from typing import Any

import yaml

from sandbox.platform import Platform
from sandbox.spaces import wait_for

from .helpers import (
    SYNC_DEADLINE,
    UP_DEADLINE,
    XR,
    app_files,
    configmap_value,
    controlplane,
    create,
    get,
    hosted_name,
    is_true,
    unique,
)

BINDING = "team-wants-cluster-admin"


def _binding() -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": BINDING},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "someone"}
            ],
        }
    )


def _source_synced(composite: dict[str, Any] | None) -> dict[str, Any]:
    conditions = ((composite or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "SourceSynced"), {})


def test_a_stage_refused_by_the_control_planes_rbac_is_shown_on_the_composite(
    platform: Platform,
) -> None:
    namespace, name = unique("rbac"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit({**app_files("first"), "app/binding.yaml": _binding()}, "first")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, controlplane(namespace, name, repository.url))

    def refused() -> dict[str, Any] | None:
        condition = _source_synced(get(platform.kube, XR, namespace, name))
        message = str(condition.get("message", ""))
        if condition.get("status") == "False" and "Forbidden" in message:
            return condition
        return None

    condition = wait_for("SourceSynced False with the refusal", refused, UP_DEADLINE)
    assert f"ClusterRoleBinding/{BINDING}" in condition["message"], condition
    hosted = hosted_name(platform, namespace, name)
    plane = platform.hosted_control_planes[hosted]
    assert (
        plane.kube.get("clusterrolebindings", None, BINDING, "rbac.authorization.k8s.io", "v1")
        is None
    )
    # Flux applies nothing of a stage that fails its dry run; the Instance stays Ready.
    composite = get(platform.kube, XR, namespace, name)
    assert is_true(composite, "InstanceReady"), composite["status"]["conditions"]
    assert not is_true(composite, "Ready")

    # Without the binding, the stage applies and the composite is synced again.
    repository.commit(app_files("first"), "no binding")
    wait_for(
        "SourceSynced True once the binding is gone",
        lambda: is_true(get(platform.kube, XR, namespace, name), "SourceSynced"),
        SYNC_DEADLINE,
    )
    assert configmap_value(platform, hosted, "greeting") == "first"
