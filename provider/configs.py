"""Provider configs: how many resources use each, and the finalizer that keeps used ones.

As crossplane-runtime's providerconfig reconciler: ``status.users`` counts the
usages that name the config, and the ``in-use.crossplane.io`` finalizer stays
on a config while anything uses it, so deleting it waits for its users.
"""

from __future__ import annotations

from typing import Any

from provider.cache import CachedClient
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
# How long a usage change waits before its config's users are counted again:
# a config that 5,000 new Instances start using at once gets its status written
# about once a second, not 5,000 times (each a conflict risk with the next).
# A deleted config's finalizer is decided by the same count, so its deletion
# waits at most this much longer for its last user to go.
USERS_COALESCE_SECONDS = 1.0
USAGES_BY_CONFIG = "config"
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

    def __init__(
        self,
        cluster: Cluster,
        config: Resource,
        usages: Resource,
        *,
        cache: CachedClient | None = None,
    ) -> None:
        """``config`` is ProviderConfig or ClusterProviderConfig; ``usages`` its usage kind.

        ``cache`` reads configs and usages from watches; without it they are read.
        """
        self.cluster = cluster
        self.config = config
        self.usages = usages
        self.client = cache or CachedClient(cluster)

    async def reconcile(self, namespace: str, name: str) -> Result:
        """Count the config's users; hold or release its finalizer."""
        config = await self.client.get(self.config, namespace or None, name)
        if config is None:
            return Result()
        users = await self._count_users(namespace, name)
        metadata = config["metadata"]
        finalizers: list[str] = list(metadata.get("finalizers") or [])
        deleting = bool(metadata.get("deletionTimestamp"))
        wanted = [f for f in finalizers if f != IN_USE_FINALIZER]
        if users or not deleting:
            wanted.append(IN_USE_FINALIZER)
        if sorted(wanted) != sorted(finalizers):
            metadata["finalizers"] = wanted
            config = await self.client.replace(self.config, config)
        if (config.get("status") or {}).get("users") != users:
            config.setdefault("status", {})["users"] = users
            await self.client.replace_status(self.config, config)
        return Result()

    async def _count_users(self, namespace: str, name: str) -> int:
        """How many usages name the config: from the cache's index, else a list."""
        cached = self.client.informer(self.usages)
        if cached is None or not cached.fresh():
            users, _ = await self.cluster.list(
                self.usages, namespace or None, label_selector=f"{PROVIDER_CONFIG_LABEL}={name}"
            )
            return len(users)
        return cached.count(USAGES_BY_CONFIG, f"{namespace}/{name}")


def index_usages_by_config(usage: dict[str, Any]) -> list[str]:
    """The ``namespace/name`` of the config a usage names (a cache index)."""
    return [f"{namespace}/{name}" for namespace, name in config_of_usage(usage)]
