"""Builders of composites, inputs and observed states shared by the tests."""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

import yaml

from function.observed import Observed, Resource

COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"
CLAIM_NAMESPACE_LABEL = "crossplane.io/claim-namespace"
ROLE_ARN = "arn:aws:iam::123456789012:role/team-a-myctp-a8ef8cc7-backup"


def example_input() -> dict[str, Any]:
    """The embedded example input (the one the Compositions carry)."""
    text = resources.files("function").joinpath("example", "input.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def composite(
    spec: dict[str, Any] | None = None,
    *,
    name: str = "myctp",
    namespace: str | None = "team-a",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A v2 composite (namespaced), or a legacy one when ``namespace`` is None."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    api_version = "platform.acme.io/v1alpha1" if namespace else "legacy.platform.acme.io/v1alpha1"
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ControlPlane" if namespace else "XControlPlane",
        "metadata": metadata,
        "spec": copy.deepcopy(spec) if spec is not None else {},
    }
    claim_namespace = (labels or {}).get(CLAIM_NAMESPACE_LABEL)
    if not namespace and claim_namespace:
        # Crossplane binds a legacy composite to its claim with both the labels and this.
        body["spec"].setdefault(
            "claimRef",
            {
                "apiVersion": api_version,
                "kind": "ControlPlane",
                "name": (labels or {}).get("crossplane.io/claim-name", name),
                "namespace": claim_namespace,
            },
        )
    return body


SOURCE = {"url": "https://github.com/acmeorg/myctp-source"}
# The existing bucket the example input's backup.allowedBuckets allows.
SHARED_BUCKET = "acme-shared-ctp-backups"
BACKUP: dict[str, Any] = {}


def ready(
    body: dict[str, Any] | None = None,
    *,
    status: str = "True",
    reason: str = "Available",
    message: str = "",
    extra_status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An observed object carrying a Ready condition."""
    body = copy.deepcopy(body) if body else {}
    condition = {"type": "Ready", "status": status, "reason": reason}
    if message:
        condition["message"] = message
    body.setdefault("status", {}).update(extra_status or {})
    body["status"]["conditions"] = [condition]
    return body


def observed(
    xr: dict[str, Any],
    resources_: dict[str, dict[str, Any]] | None = None,
    connection_details: dict[str, dict[str, bytes]] | None = None,
) -> Observed:
    """An Observed state from composed bodies by composition resource name."""
    details = connection_details or {}
    return Observed(
        composite=xr,
        resources={
            name: Resource(body=body, connection_details=details.get(name, {}))
            for name, body in (resources_ or {}).items()
        },
    )


def role_with_arn(arn: str = ROLE_ARN) -> dict[str, Any]:
    """An observed Role that reports its ARN (and is Ready)."""
    return ready({"kind": "Role", "status": {"atProvider": {"arn": arn}}})


def not_ready(
    kind: str = "Instance", reason: str = "Creating", message: str = ""
) -> dict[str, Any]:
    """An observed object whose Ready condition is False."""
    return ready(
        {"kind": kind, "metadata": {"name": "myctp"}},
        status="False",
        reason=reason,
        message=message,
    )
