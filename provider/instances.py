"""The Kubernetes side of Instances: the resource, its connection secret, usages and events.

``InstanceAPI`` is the reconciler's ``ManagedAPI`` for Instances, on ``kube``.
Given a ``CachedClient`` it reads Instances, usages and connection secrets from
watch-fed caches, so a steady poll of an unchanged Instance sends nothing;
without one every read goes to the API server.

The connection secrets it writes carry ``CONNECTION_SECRET_LABEL``, which is
what the provider's cache of Secrets selects: a Secret made before the label
was added is found by a read and gets the label on its next write.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Mapping
from typing import Any

from provider import kube
from provider.cache import CachedClient
from provider.events import EventRecorder
from provider.kube import Cluster
from provider.managed.external import ManagedObject
from provider.managed.reconciler import ConflictError
from provider.model import (
    CLUSTER_PROVIDER_CONFIG_USAGES,
    CONNECTION_SECRET_LABEL,
    CONNECTION_SECRET_TYPE,
    INSTANCES,
    PROVIDER_CONFIG_USAGES,
    InstanceSpec,
    parse,
)
from provider.runtime import metrics

PROVIDER_CONFIG_LABEL = "crossplane.io/provider-config"


class NotControllableError(Exception):
    """The connection secret exists and is not the Instance's to write."""


def owner_reference(managed: Mapping[str, Any]) -> dict[str, Any]:
    """A controller owner reference to ``managed``."""
    return {
        "apiVersion": managed["apiVersion"],
        "kind": managed["kind"],
        "name": managed["metadata"]["name"],
        "uid": managed["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def export_status(managed: Mapping[str, Any]) -> None:
    """Export an Instance's readiness, Crossplane version and restore as metrics."""
    status = managed.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    at_provider = status.get("atProvider") or {}
    restore = at_provider.get("restore") or {}
    metrics.record_instance(
        managed["metadata"].get("namespace", ""),
        managed["metadata"]["name"],
        ready=ready,
        crossplane_version=at_provider.get("crossplaneVersion"),
        restore=(
            (
                str(restore["phase"]),
                int(restore.get("applied") or 0),
                int(restore.get("total") or 0),
            )
            if restore.get("phase")
            else None
        ),
    )


class InstanceAPI:
    """Reads and writes Instances and what hangs off them."""

    def __init__(self, cluster: Cluster, *, cache: CachedClient | None = None) -> None:
        """Use ``cluster``, the one the Instances live in; read through ``cache``."""
        self.cluster = cluster
        self.client = cache or CachedClient(cluster)
        self.events = EventRecorder(cluster)

    async def get(self, namespace: str, name: str) -> ManagedObject | None:
        """The Instance, or None; its status is exported as metrics at every read."""
        managed = await self.client.get(INSTANCES, namespace, name)
        if managed is None:
            metrics.forget_instance(namespace, name)
        else:
            export_status(managed)
        return managed

    async def update(self, managed: ManagedObject) -> ManagedObject:
        """Write metadata and spec."""
        return await self.client.replace(INSTANCES, managed)

    async def update_status(self, managed: ManagedObject) -> ManagedObject:
        """Write the status, and export it as metrics."""
        written = await self.client.replace_status(INSTANCES, managed)
        export_status(written)
        return written

    async def publish_connection(
        self, managed: ManagedObject, details: Mapping[str, bytes]
    ) -> None:
        """Write the connection secret when its data changed; controlled by the Instance.

        As crossplane-runtime's ``ConnectionSecretMustBeControllableBy``: an existing
        Secret is written only when this Instance controls it, or when nothing
        controls it and it is of the connection secret type (it is then adopted).
        Any other Secret of that name is left alone and the publish fails.

        Raises:
            NotControllableError: the Secret is not this Instance's to write.
        """
        if not details:
            return
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        if spec.write_connection_secret_to_ref is None:
            return
        namespace = managed["metadata"]["namespace"]
        name = spec.write_connection_secret_to_ref.name
        data = {key: base64.b64encode(value).decode() for key, value in sorted(details.items())}
        owner = owner_reference(managed)
        secret = self.client.get_cached(kube.SECRETS, namespace, name)
        if secret is None:
            # Most often there is none yet: create it rather than read first, and
            # read only when one exists after all (unlabelled, so not cached).
            with contextlib.suppress(kube.AlreadyExistsError):
                await self.client.create(
                    kube.SECRETS,
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {
                            "name": name,
                            "namespace": namespace,
                            "labels": {CONNECTION_SECRET_LABEL: "true"},
                            "ownerReferences": [owner],
                        },
                        "type": CONNECTION_SECRET_TYPE,
                        "data": data,
                    },
                )
                return
            secret = await self.client.get(kube.SECRETS, namespace, name)
            if secret is None:
                msg = f"secret {name} was deleted while it was being written"
                raise ConflictError(msg)
        references = secret["metadata"].get("ownerReferences") or []
        controller = next((ref for ref in references if ref.get("controller")), None)
        if controller is None and secret.get("type") != CONNECTION_SECRET_TYPE:
            msg = f"refusing to modify uncontrolled secret {name} of type {secret.get('type')!r}"
            raise NotControllableError(msg)
        if controller is not None and controller.get("uid") != owner["uid"]:
            msg = f"existing secret {name} is not controlled by this Instance"
            raise NotControllableError(msg)
        labels = secret["metadata"].get("labels") or {}
        if controller is None:
            secret["metadata"]["ownerReferences"] = [*references, owner]
        elif (secret.get("data") or {}) == data and labels.get(CONNECTION_SECRET_LABEL) == "true":
            return
        secret["metadata"]["labels"] = {**labels, CONNECTION_SECRET_LABEL: "true"}
        secret["data"] = data
        await self.client.replace(kube.SECRETS, secret)

    async def unpublish_connection(self, managed: ManagedObject) -> None:
        """Nothing to do: the Instance's owner reference has the Secret garbage collected.

        As crossplane-runtime's publisher: deleting by name could delete a Secret the
        Instance never controlled.
        """

    def _usage(self, managed: ManagedObject) -> tuple[kube.Resource, dict[str, Any]]:
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        ref = spec.provider_config_ref
        metadata = managed["metadata"]
        resource = (
            PROVIDER_CONFIG_USAGES
            if ref.kind == "ProviderConfig"
            else CLUSTER_PROVIDER_CONFIG_USAGES
        )
        usage: dict[str, Any] = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {
                "name": metadata["uid"],
                "labels": {PROVIDER_CONFIG_LABEL: ref.name},
            },
            "providerConfigRef": {"kind": ref.kind, "name": ref.name},
            "resourceRef": {
                "apiVersion": managed["apiVersion"],
                "kind": managed["kind"],
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata["uid"],
            },
        }
        if resource.namespaced:
            usage["metadata"]["namespace"] = metadata["namespace"]
            usage["metadata"]["ownerReferences"] = [owner_reference(managed)]
        # A cluster-scoped usage cannot be owned by a namespaced Instance: the garbage
        # collector treats that owner as unresolvable, never collects the usage, and a
        # foreground deletion of the Instance (kubectl --cascade=foreground, Argo CD)
        # waits for it for ever. It goes with the Instance's finalizer instead
        # (``release_provider_config``).
        return resource, usage

    async def track_provider_config(self, managed: ManagedObject) -> None:
        """Record the Instance's use of its provider config.

        Read on every reconcile, never remembered: a usage someone deleted is made
        again, and one naming a config the Instance left is corrected.
        """
        resource, usage = self._usage(managed)
        metadata = usage["metadata"]
        # A switch between ProviderConfig and ClusterProviderConfig leaves a usage of
        # the other kind behind, which would keep the old config in use for ever.
        other = (
            CLUSTER_PROVIDER_CONFIG_USAGES
            if resource is PROVIDER_CONFIG_USAGES
            else PROVIDER_CONFIG_USAGES
        )
        other_namespace = managed["metadata"]["namespace"] if other.namespaced else None
        if await self.client.get(other, other_namespace, metadata["name"]) is not None:
            await self.client.delete(other, other_namespace, metadata["name"])
        existing = await self.client.get(resource, metadata.get("namespace"), metadata["name"])
        if existing is None:
            # Made meanwhile by another reconcile: it is read again next time.
            with contextlib.suppress(kube.AlreadyExistsError):
                await self.client.create(resource, usage)
            return
        if (
            existing.get("providerConfigRef") != usage["providerConfigRef"]
            or (existing["metadata"].get("labels") or {}).get(PROVIDER_CONFIG_LABEL)
            != metadata["labels"][PROVIDER_CONFIG_LABEL]
            or existing["metadata"].get("ownerReferences") != metadata.get("ownerReferences")
        ):
            existing["providerConfigRef"] = usage["providerConfigRef"]
            # Earlier versions gave a cluster-scoped usage the Instance as owner.
            existing["metadata"]["ownerReferences"] = metadata.get("ownerReferences") or []
            existing["metadata"]["labels"] = {
                **(existing["metadata"].get("labels") or {}),
                **metadata["labels"],
            }
            await self.client.replace(resource, existing)

    async def release_provider_config(self, managed: ManagedObject) -> None:
        """Delete the Instance's usage of its provider config."""
        resource, usage = self._usage(managed)
        await self.client.delete(
            resource, usage["metadata"].get("namespace"), usage["metadata"]["name"]
        )

    async def event(self, managed: ManagedObject, type_: str, reason: str, message: str) -> None:
        """Record an event about the Instance."""
        await self.events.record(managed, type_, reason, message)
