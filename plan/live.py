"""The plan's edge to Kubernetes, through ``provider.kube`` (the project's one client).

Two clusters: the management cluster, read with the caller's own kubeconfig
(the ControlPlane, its Composition's function input, its composed resources,
the ConfigMaps and Secrets ``substituteFrom`` names, each stage's live
Kustomization and its inventory), and the team's control plane, reached
through the kubeconfig the composite's connection secret holds, parsed by
the same allow-list the provider uses for it. Nothing is written to either:
the control plane is asked for server-side dry-run applies only.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

from provider.kube import (
    Cluster,
    ForbiddenError,
    KubeError,
    NotFoundError,
    Resource,
    load_kubeconfig_text,
)

# kustomize-controller's field manager: a dry run as it shows what its apply would do.
FIELD_MANAGER = "kustomize-controller"
KUSTOMIZATIONS = Resource("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
COMPOSITIONS = Resource(
    "apiextensions.crossplane.io", "v1", "compositions", "Composition", namespaced=False
)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
KUBECONFIG_KEY = "kubeconfig"
# Requests in flight to one API server: enough to hide its latency, few enough
# for its default max-in-flight (400) and a small control plane.
CONCURRENCY = 16
# From this many objects of one kind in one namespace on, they are read with one list.
LIST_FROM = 8
# Shorter values are masked by no one: "1" or "true" would blank out half the output.
MIN_SECRET_LENGTH = 4


class Discovery:
    """Which resource serves an apiVersion and kind, asked of the server once per group version."""

    def __init__(self, cluster: Cluster) -> None:
        """Discover on ``cluster``."""
        self.cluster = cluster
        self._served: dict[str, asyncio.Task[dict[str, Resource]]] = {}

    async def resource(self, api_version: str, kind: str) -> Resource | None:
        """The resource of ``kind`` in ``api_version``; None when the server does not serve it.

        Raises:
            KubeError: discovery failed for another reason than the group not being served.
        """
        if api_version not in self._served:
            self._served[api_version] = asyncio.ensure_future(self._group_version(api_version))
        return (await self._served[api_version]).get(kind)

    async def _group_version(self, api_version: str) -> dict[str, Resource]:
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        try:
            answer = await self.cluster.request("GET", path, label="discovery")
        except NotFoundError:
            return {}
        return {
            str(item["kind"]): Resource(
                group, version, str(item["name"]), str(item["kind"]), bool(item.get("namespaced"))
            )
            for item in answer.get("resources") or ()
            if "/" not in str(item.get("name", ""))
        }


IMPERSONATE_USER = "Impersonate-User"


class ControlPlane:
    """The team's control plane: reads and dry-run applies, never a write."""

    def __init__(self, cluster: Cluster) -> None:
        """Plan against ``cluster``."""
        self.cluster = cluster
        self.discovery = Discovery(cluster)
        self._slots = asyncio.Semaphore(CONCURRENCY)
        # Live objects read by a list, by (resource, namespace) and then by name.
        self._listed: dict[
            tuple[Resource, str], asyncio.Task[dict[str, dict[str, Any]] | None]
        ] = {}

    @classmethod
    async def connect(cls, kubeconfig: Mapping[str, Any], user: str = "") -> ControlPlane:
        """The control plane through ``kubeconfig``, as ``user`` when given (impersonated).

        kustomize-controller applies through a Kustomization's kubeconfig as its
        service account when it names one (fluxcd/pkg/runtime's Impersonator): so
        does the plan, so that what RBAC refuses Flux is refused here too.

        Raises:
            KubeError: the kubeconfig is refused.
        """
        cluster = await Cluster.from_kubeconfig(kubeconfig)
        if user:
            # The official client carries no annotations.
            cluster.api_client.set_default_header(IMPERSONATE_USER, user)  # type: ignore[no-untyped-call]
        return cls(cluster)

    def prefetch(self, resource: Resource, namespace: str) -> None:
        """Read the objects of ``resource`` in ``namespace`` with one list, for ``get`` to answer.

        A stage's objects are mostly a few kinds in a few namespaces: a list each
        costs the server far less than a GET per object.
        """
        key = (resource, namespace)
        if key not in self._listed:
            self._listed[key] = asyncio.ensure_future(self._list(resource, namespace))

    async def _list(self, resource: Resource, namespace: str) -> dict[str, dict[str, Any]] | None:
        """Every object by name; None when listing is not allowed (a GET each then)."""
        try:
            async with self._slots:
                items, _ = await self.cluster.list(resource, namespace or None)
        except ForbiddenError:
            return None
        # A list's items do not repeat their apiVersion and kind.
        return {
            str(item["metadata"]["name"]): {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                **item,
            }
            for item in items
        }

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        """The live object, or None."""
        listed = self._listed.get((resource, namespace))
        if listed is not None:
            found = await listed
            if found is not None:
                return found.get(name)
        async with self._slots:
            return await self.cluster.get(resource, namespace or None, name)

    async def dry_run(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """What a server-side apply as kustomize-controller would leave, stored nowhere."""
        async with self._slots:
            return await self.cluster.apply(
                resource, obj, field_manager=FIELD_MANAGER, dry_run=True
            )

    async def close(self) -> None:
        """Close its connections."""
        await self.cluster.close()


class ControlPlanes:
    """The control plane as each identity Flux applies stages with: one client per identity."""

    def __init__(self, kubeconfig: Mapping[str, Any]) -> None:
        """Connect through ``kubeconfig`` (the ControlPlane's connection secret's)."""
        self.kubeconfig = kubeconfig
        self._by_user: dict[str, ControlPlane] = {}

    async def as_user(self, user: str) -> ControlPlane:
        """The control plane as ``user`` (empty: the kubeconfig's own identity).

        Raises:
            KubeError: the kubeconfig is refused.
        """
        if user not in self._by_user:
            self._by_user[user] = await ControlPlane.connect(self.kubeconfig, user)
        return self._by_user[user]

    async def close(self) -> None:
        """Close every client's connections."""
        for target in self._by_user.values():
            await target.close()


class Management:
    """The management cluster: the ControlPlane and what the platform composed for it."""

    def __init__(self, cluster: Cluster) -> None:
        """Read from ``cluster``."""
        self.cluster = cluster
        self.discovery = Discovery(cluster)

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """An object by apiVersion and kind; None when it or its kind is not there."""
        resource = await self.discovery.resource(api_version, kind)
        if resource is None:
            return None
        return await self.cluster.get(resource, namespace if resource.namespaced else None, name)

    async def composite(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        """The ControlPlane (or a legacy XControlPlane, with an empty namespace).

        Raises:
            KubeError: it is not there, or cannot be read.
        """
        found = await self.cluster.get(resource, namespace or None, name)
        if found is None:
            where = f"{namespace}/{name}" if namespace else name
            msg = (
                f"{resource.kind or resource.plural} {where} is not found in the management cluster"
            )
            raise KubeError(msg)
        return found

    async def function_input(self, composite: Mapping[str, Any]) -> dict[str, Any]:
        """The Composition the composite uses (its input is the function's).

        Raises:
            KubeError: the composite names no Composition, or it cannot be read.
        """
        spec = composite.get("spec") or {}
        ref = (spec.get("crossplane") or {}).get("compositionRef") or spec.get("compositionRef")
        name = (ref or {}).get("name")
        if not name:
            msg = "the composite names no Composition yet (spec.crossplane.compositionRef)"
            raise KubeError(msg)
        found = await self.cluster.get(COMPOSITIONS, None, str(name))
        if found is None:
            msg = f"Composition {name} is not found in the management cluster"
            raise KubeError(msg)
        return found

    async def composed(self, composite: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The composite's composed resources that can be read; the rest are left out."""
        spec = composite.get("spec") or {}
        refs = (spec.get("crossplane") or {}).get("resourceRefs") or spec.get("resourceRefs") or ()
        namespace = str((composite.get("metadata") or {}).get("namespace") or "")

        async def read(ref: Mapping[str, Any]) -> dict[str, Any] | None:
            try:
                return await self.get(
                    str(ref.get("apiVersion")),
                    str(ref.get("kind")),
                    str(ref.get("namespace") or namespace),
                    str(ref.get("name")),
                )
            except KubeError:
                return None

        found = await asyncio.gather(*(read(ref) for ref in refs))
        return [item for item in found if item is not None]

    async def kustomization(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A stage's live Kustomization, or None when Flux has none yet (a new stage)."""
        try:
            return await self.cluster.get(KUSTOMIZATIONS, namespace, name)
        except NotFoundError:
            # The Kustomization kind itself is not served: no stage has ever been applied.
            return None

    async def substitute_from(
        self, namespace: str, references: tuple[Mapping[str, Any], ...]
    ) -> list[dict[str, Any]]:
        """The ConfigMaps and Secrets ``references`` name that exist.

        Flux's own rules (``controlplane-plan-build``) decide what a missing one means.
        """
        found = []
        for reference in references:
            resource = SECRETS if reference.get("kind") == "Secret" else CONFIGMAPS
            obj = await self.cluster.get(resource, namespace, str(reference.get("name")))
            if obj is not None:
                # Only what Flux reads: a copy the build's fake client accepts.
                kept: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": resource.kind,
                    "metadata": {"name": reference.get("name"), "namespace": namespace},
                }
                kept.update({key: obj[key] for key in ("data", "stringData") if key in obj})
                found.append(kept)
        return found

    async def kubeconfig(
        self, namespace: str, name: str, key: str = KUBECONFIG_KEY
    ) -> dict[str, Any]:
        """The team's kubeconfig from the composite's connection secret.

        Raises:
            KubeError: the secret or its key is missing, or it holds no kubeconfig.
        """
        secret = await self.cluster.get(SECRETS, namespace, name)
        data = ((secret or {}).get("data") or {}).get(key)
        if not data:
            msg = f"Secret {namespace}/{name} holds no {key}: is the control plane ready?"
            raise KubeError(msg)
        try:
            text = base64.b64decode(data).decode()
        except ValueError:
            msg = f"Secret {namespace}/{name} key {key} is not a kubeconfig"
            raise KubeError(msg) from None
        return load_kubeconfig_text(text)

    async def close(self) -> None:
        """Close its connections."""
        await self.cluster.close()


def secret_values(objects: list[dict[str, Any]]) -> list[str]:
    """Every value of the Secrets among ``objects``, encoded and decoded: never to be shown."""
    values = []
    for obj in objects:
        if obj.get("kind") != "Secret":
            continue
        for encoded in (obj.get("data") or {}).values():
            values.append(str(encoded))
            try:
                values.append(base64.b64decode(str(encoded)).decode())
            except ValueError:
                continue
        for value in (obj.get("stringData") or {}).values():
            values.extend((str(value), base64.b64encode(str(value).encode()).decode()))
    return [value for value in values if len(value) >= MIN_SECRET_LENGTH]
