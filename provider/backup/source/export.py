"""What a backup holds, read from a hosted control plane, a page at a time.

The contract's selection: every object of every CRD owned by a Crossplane
package or an XRD, every ``*.crossplane.io`` kind, and namespaces,
configmaps and secrets outside the system namespaces (not
``kube-root-ca.crt``, not service-account tokens, not Helm release secrets).

Left out too, as ``up controlplane migration export`` leaves them out, is what
Crossplane (or Helm) makes again in the control plane a restore lands in
(``reinstalled``): the package manager's Lock, whatever a package revision
owns (the revisions themselves, a Configuration's XRDs and Compositions, a
provider's TLS Secrets), the TLS Secrets of Crossplane's own install, and
objects Helm manages. A restore applies the Configuration, Provider and
Function objects, and Crossplane installs the rest from the packages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from provider.backup.format.archive import ArchiveWriter, ResourceType, Summary
from provider.backup.source.versions import source_versions
from provider.kube import CRDS, Cluster, LimitExceededError, ListBounds, Resource

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
SKIPPED_SECRET_TYPES = frozenset({"kubernetes.io/service-account-token", "helm.sh/release.v1"})
SKIPPED_CONFIGMAPS = frozenset({"kube-root-ca.crt"})
CROSSPLANE_OWNER_GROUPS = ("pkg.crossplane.io", "apiextensions.crossplane.io")
PACKAGE_GROUP = "pkg.crossplane.io"
# What `core init` (or Crossplane's Helm chart) makes for Crossplane's own TLS, per install.
CROSSPLANE_NAMESPACE = "crossplane-system"
CROSSPLANE_TLS_SECRETS = frozenset(
    {"crossplane-root-ca", "crossplane-tls-server", "crossplane-tls-client"}
)
HELM_MANAGED = ("app.kubernetes.io/managed-by", "Helm")

CORE_TYPES = (
    ResourceType("namespaces", "", "v1", "Namespace", namespaced=False),
    ResourceType("configmaps", "", "v1", "ConfigMap", namespaced=True),
    ResourceType("secrets", "", "v1", "Secret", namespaced=True),
)


def _crossplane_group(group: str) -> bool:
    return group == "crossplane.io" or group.endswith(".crossplane.io")


def _owned_by_crossplane(crd: Mapping[str, Any]) -> bool:
    for owner in (crd.get("metadata") or {}).get("ownerReferences") or []:
        group = str(owner.get("apiVersion", "")).split("/")[0]
        if group in CROSSPLANE_OWNER_GROUPS:
            return True
    return False


def crd_type(crd: Mapping[str, Any]) -> ResourceType:
    """The type a CRD defines, at its storage version."""
    spec = crd["spec"]
    versions = spec.get("versions") or []
    stored = next((v for v in versions if v.get("storage")), versions[0])
    return ResourceType(
        resource=spec["names"]["plural"],
        group=spec["group"],
        version=stored["name"],
        kind=spec["names"]["kind"],
        namespaced=spec.get("scope") == "Namespaced",
        categories=tuple(spec["names"].get("categories") or ()),
        with_status_subresource="status" in (stored.get("subresources") or {}),
    )


def selected_types(
    crds: Iterable[Mapping[str, Any]], excluded: Iterable[str] = ()
) -> list[ResourceType]:
    """The core types and the CRD-defined types a backup holds, minus ``excluded``.

    ``excluded`` names types as ``resource.group`` (``resource`` for the core group).
    """
    return _with_core_types(custom_types(crds), excluded)


def custom_types(crds: Iterable[Mapping[str, Any]]) -> list[ResourceType]:
    """The types of the CRDs a backup holds: Crossplane's groups, or owned by Crossplane."""
    return [crd_type(crd) for crd in crds if owned_by_crossplane(crd)]


def _with_core_types(custom: Iterable[ResourceType], excluded: Iterable[str]) -> list[ResourceType]:
    skip = {name.lower() for name in excluded}
    types = [*CORE_TYPES, *custom]
    return sorted((t for t in types if t.folder not in skip), key=lambda t: t.folder)


def kept(rtype: ResourceType, obj: Mapping[str, Any]) -> bool:
    """Whether an object belongs in a backup."""
    metadata = obj.get("metadata") or {}
    if rtype.group == "" and rtype.resource == "namespaces":
        return str(metadata.get("name")) not in SYSTEM_NAMESPACES
    if metadata.get("namespace") in SYSTEM_NAMESPACES:
        return False
    if rtype.group == "" and rtype.resource == "configmaps":
        return str(metadata.get("name")) not in SKIPPED_CONFIGMAPS
    if rtype.group == "" and rtype.resource == "secrets":
        return obj.get("type") not in SKIPPED_SECRET_TYPES
    return True


def reinstalled(rtype: ResourceType, obj: Mapping[str, Any]) -> str | None:
    """Why Crossplane (or Helm) makes ``obj`` again where a restore lands; None when it does not.

    Such an object is neither exported nor restored (an archive made before it
    was left out still restores: its copy is skipped). Restored as it was, it
    would fight what the new control plane made: a Lock naming revisions that
    are not there, a revision whose owner has another UID, an XRD a
    Configuration's revision must own to install it, another install's CA.
    """
    metadata = obj.get("metadata") or {}
    if rtype.group == PACKAGE_GROUP and rtype.kind == "Lock":
        return "the package manager's Lock, which it writes again"
    for owner in metadata.get("ownerReferences") or []:
        if str(owner.get("apiVersion", "")).split("/")[0] == PACKAGE_GROUP:
            return "owned by a package or its revision, which the package manager makes again"
    labels = metadata.get("labels") or {}
    if labels.get(HELM_MANAGED[0]) == HELM_MANAGED[1]:
        return "managed by Helm, which installs it again"
    if (
        rtype.group == ""
        and rtype.resource == "secrets"
        and metadata.get("namespace") == CROSSPLANE_NAMESPACE
        and metadata.get("name") in CROSSPLANE_TLS_SECRETS
    ):
        return "a TLS Secret of Crossplane's own install, which makes its own"
    return None


def _kubernetes_group(group: str) -> bool:
    """A group Kubernetes itself serves (apps, rbac.authorization.k8s.io, ...), never a CRD's."""
    return "." not in group or group.endswith((".k8s.io", ".kubernetes.io"))


def owned_by_crossplane(crd: Mapping[str, Any]) -> bool:
    """Whether export would hold the objects of this CRD: Crossplane's group, or owned by it."""
    return _crossplane_group(str(crd["spec"]["group"])) or _owned_by_crossplane(crd)


def restorable(rtype: ResourceType, obj: Mapping[str, Any]) -> str | None:
    """Why a restore refuses an object that export never writes; None when it may apply it.

    A restore writes with the provider's rights into a team's control plane, so an
    archive is held to what ``export`` selects: the three core kinds, no system
    namespace, no skipped Secret type or ConfigMap, no Kubernetes group. Whether a
    custom group's CRD is owned by a package or an XRD is checked in the control
    plane itself, before its objects are applied.
    """
    if not rtype.group:
        core = next((t for t in CORE_TYPES if t.folder == rtype.folder), None)
        if core is None or (core.version, core.kind, core.namespaced) != (
            rtype.version,
            rtype.kind,
            rtype.namespaced,
        ):
            return f"{rtype.kind} of the core group is not one export writes"
    elif _kubernetes_group(rtype.group):
        return f"group {rtype.group} is Kubernetes' own, not one export writes"
    if not kept(rtype, obj):
        return (
            "is in a system namespace, a skipped Secret type or a skipped ConfigMap, "
            "which export never writes"
        )
    return None


def api_resource(rtype: ResourceType) -> Resource:
    """Where a type lives on an API server."""
    return Resource(rtype.group, rtype.version, rtype.resource, rtype.kind, rtype.namespaced)


@dataclass(frozen=True)
class ReadLimits:
    """How much an export reads from a control plane, which a team controls.

    A server that never ends a list, answers with one huge body, or sends it a
    byte at a time must fail the export, not exhaust the controller: memory
    holds one page and the types, never a whole list. Each limit fails with a
    ``LimitExceededError`` whose reason names it.

    Attributes:
        lists: Pages per list and bytes per answer (``provider.kube.ListBounds``).
        max_objects: Objects read in all, CRDs included: below the archive's
            ``Limits.max_members``, so whatever is exported can be restored.
        max_types: Custom types a backup holds (a control plane with several large
            providers has a few thousand CRDs).
    """

    lists: ListBounds = field(default_factory=ListBounds)
    max_objects: int = 200_000
    max_types: int = 10_000


TOO_MANY_OBJECTS = "TooManyObjects"
TOO_MANY_TYPES = "TooManyTypes"


class _Budget:
    """Objects read so far, against ``ReadLimits.max_objects``."""

    def __init__(self, cluster: Cluster, limits: ReadLimits) -> None:
        self.cluster = cluster
        self.limits = limits
        self.read = 0

    async def pages(self, resource: Resource) -> AsyncIterator[list[dict[str, Any]]]:
        async for page in self.cluster.pages(resource, bounds=self.limits.lists):
            self.read += len(page)
            if self.read > self.limits.max_objects:
                msg = (
                    f"the control plane holds more than {self.limits.max_objects} objects "
                    "(the limit of objects per backup)"
                )
                raise LimitExceededError(msg, TOO_MANY_OBJECTS)
            yield page


async def _selected(budget: _Budget, excluded: Iterable[str]) -> list[ResourceType]:
    """The selected types; of the CRDs only the types are kept, a page at a time."""
    custom: list[ResourceType] = []
    async for page in budget.pages(CRDS):
        custom.extend(custom_types(page))
        if len(custom) > budget.limits.max_types:
            msg = (
                f"the control plane has more than {budget.limits.max_types} custom types to "
                "back up (the limit of types per backup)"
            )
            raise LimitExceededError(msg, TOO_MANY_TYPES)
    return _with_core_types(custom, excluded)


async def export(
    cluster: Cluster,
    writer: ArchiveWriter,
    excluded: Iterable[str] = (),
    *,
    progress: Callable[[int], None] | None = None,
    limits: ReadLimits | None = None,
) -> int:
    """Write every selected object of ``cluster`` into ``writer``; the count written.

    ``progress`` is told how many more objects were written after each page.

    Raises:
        LimitExceededError: the control plane went past one of ``limits``.
    """
    budget = _Budget(cluster, limits or ReadLimits())
    count = 0
    for rtype in await _selected(budget, excluded):
        async for page in budget.pages(api_resource(rtype)):
            written = 0
            for obj in page:
                if kept(rtype, obj) and reinstalled(rtype, obj) is None:
                    # A list leaves out each item's apiVersion and kind.
                    obj.setdefault("apiVersion", rtype.api_version)
                    obj.setdefault("kind", rtype.kind)
                    writer.add(rtype, obj)
                    written += 1
            count += written
            if progress is not None and written:
                progress(written)
    return count


async def estimate(cluster: Cluster, excluded: Iterable[str] = ()) -> int:
    """About how many objects ``export`` would write: one request of one item per type.

    The API server tells how many items a paged list has left; objects that
    ``kept`` leaves out (system namespaces' Secrets and ConfigMaps) are counted.
    """
    limits = ReadLimits()
    total = 0
    for rtype in await _selected(_Budget(cluster, limits), excluded):
        resource = api_resource(rtype)
        answer = await cluster.request(
            "GET",
            resource.path(),
            query={"limit": "1"},
            label=resource.plural,
            max_bytes=limits.lists.max_response_bytes,
        )
        remaining = (answer.get("metadata") or {}).get("remainingItemCount") or 0
        total += len(answer.get("items") or []) + int(remaining)
    return total


async def write_archive(
    cluster: Cluster,
    sink: SupportsWrite[bytes],
    *,
    instance: str,
    exported_at: datetime,
    excluded: Iterable[str] = (),
    progress: Callable[[int], None] | None = None,
    limits: ReadLimits | None = None,
    crossplane_version: str = "",
) -> Summary:
    """Export ``cluster`` into ``sink`` as a whole archive, ``export.yaml`` last.

    ``export.yaml`` records the versions ``cluster`` runs
    (``versions.source_versions``): ``crossplane_version``, when given, is the Space's
    word for a hosted control plane, and wins over the control plane's own.

    On an error nothing more reaches ``sink`` (see ``ArchiveWriter.discard``): the
    caller aborts the upload or removes the file.

    Raises:
        LimitExceededError: the control plane went past one of ``limits``.
    """
    excluded = tuple(excluded)
    writer = ArchiveWriter(sink)
    try:
        source = await source_versions(cluster, crossplane_version)
        await export(cluster, writer, excluded, progress=progress, limits=limits)
    except BaseException:
        writer.discard()
        raise
    return writer.finish(
        instance=instance,
        exported_at=exported_at,
        options={"excludedResources": list(excluded)},
        source=source,
    )
