"""Which Secret a Backup may read its control plane's kubeconfig from.

Only the connection secret the provider wrote for the Instance: the Secret
``spec.writeConnectionSecretToRef`` names, of type
``connection.crossplane.io/v1alpha1``, controlled by that Instance (an
ownerReference with ``controller: true`` and the Instance's uid), as the
provider makes it. A Secret a team made under that name before the provider
did, or of another type, is refused. A team can still edit the provider's
Secret in place (its namespace is the team's); the provider writes it back
within a poll, and the kubeconfig's server must meanwhile be on a host the
operator allows (``provider.kubeconfig.ControlPlaneHosts``), so an edited one
can point nowhere else.

Pure: no Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.model import CONNECTION_SECRET_TYPE, INSTANCES

NOT_INSTANCE_CONNECTION_SECRET = "NotInstanceConnectionSecret"  # noqa: S105 (a reason)
KUBECONFIG_NOT_ALLOWED = "KubeconfigNotAllowed"
CONTROL_PLANE_HOST_NOT_ALLOWED = "ControlPlaneHostNotAllowed"


class SourceRefusedError(ValueError):
    """A kubeconfig a Backup may not use; the message names the rule, never the kubeconfig."""

    def __init__(self, message: str, reason: str) -> None:
        """``reason`` is the Backup condition's reason, naming the rule."""
        super().__init__(message)
        self.reason = reason


def connection_secret_name(instance: Mapping[str, Any]) -> str:
    """The name in the Instance's ``spec.writeConnectionSecretToRef``, or ``""``."""
    ref = (instance.get("spec") or {}).get("writeConnectionSecretToRef") or {}
    return str(ref.get("name") or "")


def check_connection_secret(instance: Mapping[str, Any], secret: Mapping[str, Any]) -> None:
    """Refuse a Secret that is not the connection secret the provider wrote for ``instance``.

    Raises:
        SourceRefusedError: naming the rule the Secret breaks.
    """
    metadata = instance["metadata"]
    where = f"Secret {metadata['namespace']}/{connection_secret_name(instance)}"
    if secret.get("type") != CONNECTION_SECRET_TYPE:
        msg = f"{where} is not of type {CONNECTION_SECRET_TYPE}, as the provider writes it"
        raise SourceRefusedError(msg, NOT_INSTANCE_CONNECTION_SECRET)
    controller = next(
        (
            ref
            for ref in (secret.get("metadata") or {}).get("ownerReferences") or []
            if ref.get("controller") is True
        ),
        None,
    )
    if (
        controller is None
        or controller.get("uid") != metadata.get("uid")
        or controller.get("kind") != INSTANCES.kind
        or controller.get("apiVersion") != INSTANCES.api_version
        or controller.get("name") != metadata.get("name")
    ):
        msg = (
            f"{where} is not controlled by Instance {metadata['namespace']}/{metadata['name']} "
            "(an ownerReference with controller: true and the Instance's uid, as the provider "
            "writes it)"
        )
        raise SourceRefusedError(msg, NOT_INSTANCE_CONNECTION_SECRET)
