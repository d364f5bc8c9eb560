"""Kubernetes Events about our objects; a repeat of one counts up instead of adding another."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from provider import kube
from provider.kube import Cluster

COMPONENT = "controlplane-provider"
_REMEMBERED = 4096


class EventRecorder:
    """Records core/v1 Events on one cluster."""

    def __init__(self, cluster: Cluster, component: str = COMPONENT) -> None:
        """Record on ``cluster`` as ``component``."""
        self.cluster = cluster
        self.component = component
        # The events recorded lately, to count repeats; bounded, oldest dropped first.
        self._recent: OrderedDict[tuple[str, str, str], tuple[str, int]] = OrderedDict()

    async def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an event about ``obj`` (Normal or Warning)."""
        metadata = obj["metadata"]
        # A cluster-scoped object's events go to the default namespace, as client-go's do.
        namespace = metadata.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        key = (str(metadata.get("uid")), reason, message)
        seen = self._recent.get(key)
        if seen is not None:
            name, count = seen
            patch = {"count": count + 1, "lastTimestamp": now}
            try:
                await self.cluster.merge_patch(kube.EVENTS, namespace, name, patch)
                self._recent[key] = (name, count + 1)
                self._recent.move_to_end(key)
                return
            except kube.NotFoundError:
                del self._recent[key]
        created = await self.cluster.create(
            kube.EVENTS,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "generateName": f"{metadata['name']}.",
                    "namespace": namespace,
                },
                "involvedObject": {
                    "apiVersion": obj["apiVersion"],
                    "kind": obj["kind"],
                    "name": metadata["name"],
                    "namespace": metadata.get("namespace", ""),
                    "uid": metadata.get("uid"),
                },
                "type": type_,
                "reason": reason,
                "message": message,
                "source": {"component": self.component},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )
        self._recent[key] = (created["metadata"]["name"], 1)
        while len(self._recent) > _REMEMBERED:
            self._recent.popitem(last=False)
