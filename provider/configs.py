"""Provider configs: how many resources use each, and the finalizer that keeps used ones.

As crossplane-runtime's providerconfig reconciler: ``status.users`` counts the
usages that name the config, and the ``in-use.crossplane.io`` finalizer stays
on a config while anything uses it, so deleting it waits for its users.
"""

from __future__ import annotations

from typing import Any

from provider.instances import PROVIDER_CONFIG_LABEL
from provider.kube import Cluster, Resource
from provider.managed.reconciler import Result
from provider.model import (
    CLUSTER_PROVIDER_CONFIG_USAGES,
    CLUSTER_PROVIDER_CONFIGS,
    PROVIDER_CONFIG_USAGES,
    PROVIDER_CONFIGS,
)

IN_USE_FINALIZER = "in-use.crossplane.io"
CONFIG_OF_USAGE = {
    PROVIDER_CONFIG_USAGES.plural: PROVIDER_CONFIGS,
    CLUSTER_PROVIDER_CONFIG_USAGES.plural: CLUSTER_PROVIDER_CONFIGS,
}


def config_of_usage(usage: dict[str, Any]) -> list[tuple[str, str]]:
    """The key of the config a usage names (a watch mapper)."""
    metadata = usage.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(PROVIDER_CONFIG_LABEL)
    return [(str(metadata.get("namespace", "")), name)] if name else []


class ConfigReconciler:
    """Keeps one kind of provider config's users and finalizer."""

    def __init__(self, cluster: Cluster, config: Resource, usages: Resource) -> None:
        """``config`` is ProviderConfig or ClusterProviderConfig; ``usages`` its usage kind."""
        self.cluster = cluster
        self.config = config
        self.usages = usages

    async def reconcile(self, namespace: str, name: str) -> Result:
        """Count the config's users; hold or release its finalizer."""
        config = await self.cluster.get(self.config, namespace or None, name)
        if config is None:
            return Result()
        users, _ = await self.cluster.list(
            self.usages, namespace or None, label_selector=f"{PROVIDER_CONFIG_LABEL}={name}"
        )
        metadata = config["metadata"]
        finalizers: list[str] = list(metadata.get("finalizers") or [])
        deleting = bool(metadata.get("deletionTimestamp"))
        wanted = [f for f in finalizers if f != IN_USE_FINALIZER]
        if users or not deleting:
            wanted.append(IN_USE_FINALIZER)
        if sorted(wanted) != sorted(finalizers):
            metadata["finalizers"] = wanted
            config = await self.cluster.replace(self.config, config)
        if (config.get("status") or {}).get("users") != len(users):
            config.setdefault("status", {})["users"] = len(users)
            await self.cluster.replace_status(self.config, config)
        return Result()
