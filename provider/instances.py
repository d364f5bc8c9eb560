"""The Kubernetes side of Instances: the resource, its connection secret, usages and events.

``InstanceAPI`` is the reconciler's ``ManagedAPI`` for Instances, on ``kube``.
It remembers the usages it tracked, so a steady poll of an unchanged
Instance sends reads only.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from provider import kube
from provider.events import EventRecorder
from provider.kube import Cluster
from provider.managed.external import ManagedObject
from provider.model import (
    CLUSTER_PROVIDER_CONFIG_USAGES,
    CONNECTION_SECRET_TYPE,
    INSTANCES,
    PROVIDER_CONFIG_USAGES,
    InstanceSpec,
    parse,
)

PROVIDER_CONFIG_LABEL = "crossplane.io/provider-config"


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


class InstanceAPI:
    """Reads and writes Instances and what hangs off them."""

    def __init__(self, cluster: Cluster) -> None:
        """Use ``cluster``, the one the Instances live in."""
        self.cluster = cluster
        self._tracked: set[tuple[str, str]] = set()
        self.events = EventRecorder(cluster)

    async def get(self, namespace: str, name: str) -> ManagedObject | None:
        """The Instance, or None."""
        return await self.cluster.get(INSTANCES, namespace, name)

    async def update(self, managed: ManagedObject) -> ManagedObject:
        """Write metadata and spec."""
        return await self.cluster.replace(INSTANCES, managed)

    async def update_status(self, managed: ManagedObject) -> ManagedObject:
        """Write the status."""
        return await self.cluster.replace_status(INSTANCES, managed)

    async def publish_connection(
        self, managed: ManagedObject, details: Mapping[str, bytes]
    ) -> None:
        """Write the connection secret when its data changed; owned by the Instance."""
        if not details:
            return
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        if spec.write_connection_secret_to_ref is None:
            return
        namespace = managed["metadata"]["namespace"]
        name = spec.write_connection_secret_to_ref.name
        data = {key: base64.b64encode(value).decode() for key, value in sorted(details.items())}
        secret = await self.cluster.get(kube.SECRETS, namespace, name)
        if secret is None:
            await self.cluster.create(
                kube.SECRETS,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "ownerReferences": [owner_reference(managed)],
                    },
                    "type": CONNECTION_SECRET_TYPE,
                    "data": data,
                },
            )
        elif (secret.get("data") or {}) != data:
            secret["data"] = data
            await self.cluster.replace(kube.SECRETS, secret)

    async def unpublish_connection(self, managed: ManagedObject) -> None:
        """Delete the connection secret."""
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        if spec.write_connection_secret_to_ref is None:
            return
        namespace = managed["metadata"]["namespace"]
        name = spec.write_connection_secret_to_ref.name
        await self.cluster.delete(kube.SECRETS, namespace, name)

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
                "ownerReferences": [owner_reference(managed)],
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
        return resource, usage

    async def track_provider_config(self, managed: ManagedObject) -> None:
        """Record the Instance's use of its provider config (once per config)."""
        resource, usage = self._usage(managed)
        key = (usage["metadata"]["name"], usage["providerConfigRef"]["name"])
        if key in self._tracked:
            return
        try:
            await self.cluster.create(resource, usage)
        except kube.AlreadyExistsError:
            existing = await self.cluster.get(
                resource, usage["metadata"].get("namespace"), usage["metadata"]["name"]
            )
            if (
                existing is not None
                and existing.get("providerConfigRef") != usage["providerConfigRef"]
            ):
                existing["providerConfigRef"] = usage["providerConfigRef"]
                existing["metadata"]["labels"] = usage["metadata"]["labels"]
                await self.cluster.replace(resource, existing)
        self._tracked.add(key)

    async def release_provider_config(self, managed: ManagedObject) -> None:
        """Delete the Instance's usage of its provider config."""
        resource, usage = self._usage(managed)
        await self.cluster.delete(
            resource, usage["metadata"].get("namespace"), usage["metadata"]["name"]
        )
        self._tracked = {k for k in self._tracked if k[0] != usage["metadata"]["name"]}

    async def event(self, managed: ManagedObject, type_: str, reason: str, message: str) -> None:
        """Record an event about the Instance."""
        await self.events.record(managed, type_, reason, message)
