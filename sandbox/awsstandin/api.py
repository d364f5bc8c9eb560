"""The Kubernetes side of one provider-aws kind, for the generic managed reconciler."""

from __future__ import annotations

from collections.abc import Mapping

from provider.events import EventRecorder
from provider.kube import Cluster, Resource
from provider.managed.external import ManagedObject

COMPONENT = "provider-aws-standin"


class KindAPI:
    """Reads and writes managed resources of one kind in one flavour.

    Connection secrets and ProviderConfigUsages are not written: the composed
    S3 and IAM resources publish no connection details, and no ProviderConfig
    is read (see the package's notes).
    """

    def __init__(self, cluster: Cluster, resource: Resource, events: EventRecorder) -> None:
        """Serve ``resource`` on ``cluster``."""
        self.cluster = cluster
        self.resource = resource
        self.events = events

    async def get(self, namespace: str, name: str) -> ManagedObject | None:
        """The resource, or None."""
        return await self.cluster.get(self.resource, namespace or None, name)

    async def update(self, managed: ManagedObject) -> ManagedObject:
        """Write metadata and spec."""
        return await self.cluster.replace(self.resource, managed)

    async def update_status(self, managed: ManagedObject) -> ManagedObject:
        """Write the status."""
        return await self.cluster.replace_status(self.resource, managed)

    async def publish_connection(
        self, managed: ManagedObject, details: Mapping[str, bytes]
    ) -> None:
        """Nothing to publish: these kinds have no connection details here."""

    async def unpublish_connection(self, managed: ManagedObject) -> None:
        """Nothing was published."""

    async def track_provider_config(self, managed: ManagedObject) -> None:
        """No ProviderConfigUsage is written."""

    async def release_provider_config(self, managed: ManagedObject) -> None:
        """No ProviderConfigUsage was written."""

    async def event(self, managed: ManagedObject, type_: str, reason: str, message: str) -> None:
        """Record an event about the resource."""
        await self.events.record(managed, type_, reason, message)
