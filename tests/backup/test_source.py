"""Which Secret a Backup reads its kubeconfig from (``backup.source.connection_secret``): pure."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from provider.backup.source.connection_secret import (
    NOT_INSTANCE_CONNECTION_SECRET,
    SourceRefusedError,
    check_connection_secret,
)

UID = "6b0c5f0e-0000-4000-8000-000000000001"
INSTANCE: dict[str, Any] = {
    "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
    "kind": "Instance",
    "metadata": {"name": "myctp", "namespace": "team-a", "uid": UID},
    "spec": {"writeConnectionSecretToRef": {"name": "myctp-kubeconfig"}},
}
OWNER = {
    "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
    "kind": "Instance",
    "name": "myctp",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": True,
}


def provider_written(**changes: Any) -> dict[str, Any]:
    """The connection secret as the provider writes it, with ``changes`` on top."""
    secret: dict[str, Any] = {
        "metadata": {
            "name": "myctp-kubeconfig",
            "namespace": "team-a",
            "ownerReferences": [dict(OWNER)],
        },
        "type": "connection.crossplane.io/v1alpha1",
        "data": {"kubeconfig": "e30="},
    }
    secret.update(changes)
    return secret


def with_owner(**changes: Any) -> dict[str, Any]:
    return provider_written(
        metadata={"name": "myctp-kubeconfig", "ownerReferences": [{**OWNER, **changes}]}
    )


@dataclass(frozen=True)
class SecretCase:
    reason: str
    secret: dict[str, Any]
    refused: str | None = None
    instance: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(INSTANCE))


SECRET_CASES = [
    SecretCase("The provider's own secret is used.", provider_written()),
    SecretCase(
        "Another controller's owner reference beside it does not matter.",
        provider_written(
            metadata={
                "name": "myctp-kubeconfig",
                "ownerReferences": [{**OWNER, "controller": False, "uid": "other"}, dict(OWNER)],
            }
        ),
    ),
    SecretCase(
        "An Opaque Secret a team made is refused.",
        provider_written(type="Opaque"),
        "is not of type connection.crossplane.io/v1alpha1",
    ),
    SecretCase(
        "A Secret of the right type that nothing controls (made before the provider) is refused.",
        provider_written(metadata={"name": "myctp-kubeconfig"}),
        "is not controlled by Instance team-a/myctp",
    ),
    SecretCase(
        "A Secret controlled by an earlier Instance of the same name is refused.",
        with_owner(uid="6b0c5f0e-0000-4000-8000-000000000002"),
        "is not controlled by Instance team-a/myctp",
    ),
    SecretCase(
        "An owner reference to the Instance that is not its controller is refused.",
        with_owner(controller=False),
        "is not controlled by Instance team-a/myctp",
    ),
    SecretCase(
        "A controller of another kind with the Instance's uid is refused.",
        with_owner(kind="Backup"),
        "is not controlled by Instance team-a/myctp",
    ),
    SecretCase(
        "A controller of another group with the Instance's uid is refused.",
        with_owner(apiVersion="example.org/v1"),
        "is not controlled by Instance team-a/myctp",
    ),
]


@pytest.mark.parametrize("case", SECRET_CASES, ids=lambda case: case.reason)
def test_only_the_connection_secret_the_provider_wrote_is_read(case: SecretCase) -> None:
    if case.refused is None:
        check_connection_secret(case.instance, case.secret)
        return
    with pytest.raises(SourceRefusedError, match=case.refused) as refused:
        check_connection_secret(case.instance, case.secret)
    assert refused.value.reason == NOT_INSTANCE_CONNECTION_SECRET
    assert "e30=" not in str(refused.value), "the kubeconfig is never quoted"
