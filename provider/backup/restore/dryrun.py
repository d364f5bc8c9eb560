"""What a restore would do to a control plane, found without changing it.

``controlplane-backup restore --dry-run`` walks a verified archive in the
restore's own order (``steps.order``, ``restorer.parsed_batches``) and asks
the API server for each object: a GET for what is live, and a server-side
apply with ``dryRun=All`` as the restore's field manager for what the restore
would leave, admitted, defaulted and merged, with nothing stored. Each object
is then to be created, changed (with a unified diff, ``diff.unified``) or
left unchanged.

Objects are shown as the restore leaves them: a managed resource lands paused
and is unpaused at the end unless it was paused in the backup, so its pause is
shown as it ends. Two kinds of object cannot be checked by the server, only
listed as created: those in a namespace this restore creates, and those of a
custom type whose CRD is not Established yet (the restore waits for it, as
Crossplane's package manager installs it). Owner references are rewritten as
the restore rewrites them; an owner still to be created has no UID yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Literal

from provider.backup.format import archive
from provider.backup.format.archive import ResourceType
from provider.backup.restore import diff
from provider.backup.restore.restorer import (
    FIELD_MANAGER,
    ObjectKey,
    Progress,
    RestoreError,
    parsed_batches,
    repoint_owners,
)
from provider.backup.restore.steps import order
from provider.backup.source.export import api_resource, owned_by_crossplane, reinstalled
from provider.kube import CRDS, Cluster, KubeError
from provider.managed import meta

Action = Literal["create", "change", "unchanged", "skip"]
# Where an owner is still to be created, its dependents name it with this.
NEW_OWNER_UID = "(uid of the restored owner)"


@dataclass(frozen=True)
class Planned:
    """What the restore would do to one object."""

    action: Action
    kind: str
    namespace: str
    name: str
    path: str
    diff: str = ""
    note: str = ""


class DryRun:
    """Plans a restore of one verified archive into ``target``; changes nothing."""

    def __init__(
        self,
        target: Cluster,
        file: IO[bytes],
        manifest: archive.Manifest,
        *,
        limits: archive.Limits | None = None,
        progress: Progress | None = None,
    ) -> None:
        """``file`` holds the archive that ``manifest`` describes (``archive.verify``'s)."""
        self.target = target
        self.file = file
        self.manifest = manifest
        self.limits = limits or archive.Limits()
        self.progress = progress
        self.new_namespaces: set[str] = set()
        # Each object of the archive planned so far -> its UID, as the restore rewrites owners.
        self.uids: dict[ObjectKey, str] = {}

    async def changes(self) -> AsyncIterator[Planned]:
        """What the restore would do, object by object, in its order.

        Raises:
            RestoreError: the restore would stop here; the message says why, as its would.
        """
        types = self.manifest.types
        for step in sorted({order(t) for t in types.values()}):
            folders = {folder for folder, t in types.items() if order(t) == step}
            unchecked = {folder: await self._unestablished(types[folder]) for folder in folders}
            self.file.seek(0)
            async for batch in parsed_batches(
                self.file, self.manifest, folders, limits=self.limits
            ):
                # Owners come in earlier steps, so a batch's objects do not depend on each other.
                planned = await asyncio.gather(
                    *(self._plan(rtype, obj, unchecked[rtype.folder]) for rtype, obj in batch)
                )
                for item in planned:
                    yield item
                if self.progress is not None:
                    self.progress(len(batch))

    async def _unestablished(self, rtype: ResourceType) -> str:
        """Why the server cannot check this type's objects yet; empty when it can."""
        if not rtype.group:
            return ""
        name = f"{rtype.resource}.{rtype.group}"
        crd = await self.target.get(CRDS, None, name)
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        established = any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )
        if not established:
            return (
                f"not checked: CustomResourceDefinition {name} is not Established yet "
                "(the restore waits for it)"
            )
        if crd is None or not owned_by_crossplane(crd):
            msg = (
                f"CustomResourceDefinition {name} is not Crossplane's nor owned by a "
                "package or an XRD in the control plane: its objects are not restored"
            )
            raise RestoreError(msg)
        return ""

    async def _plan(self, rtype: ResourceType, obj: dict[str, Any], unchecked: str) -> Planned:
        metadata = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        namespace, name = str(metadata.get("namespace") or ""), str(metadata["name"])
        path = archive.member_path(rtype, obj)
        skipped = reinstalled(rtype, obj)
        if skipped is not None:
            return Planned("skip", rtype.kind, namespace, name, path, note=skipped)
        repoint_owners(metadata, self.uids)
        key = (rtype.api_version, rtype.kind, namespace, name)
        if not unchecked and namespace in self.new_namespaces:
            unchecked = f"not checked: namespace {namespace} is created by this restore"
        if unchecked:
            self.uids[key] = NEW_OWNER_UID
            return Planned("create", rtype.kind, namespace, name, path, note=unchecked)
        resource = api_resource(rtype)
        try:
            live = await self.target.get(resource, namespace or None, name)
            proposed = await self.target.apply(
                resource, obj, field_manager=FIELD_MANAGER, dry_run=True
            )
        except KubeError as error:
            msg = f"cannot apply {rtype.kind} {namespace}/{name}: {error}"
            raise RestoreError(msg) from None
        if live is None:
            self.uids[key] = NEW_OWNER_UID
            if rtype.group == "" and rtype.resource == "namespaces":
                self.new_namespaces.add(name)
            return Planned("create", rtype.kind, namespace, name, path)
        self.uids[key] = str(live["metadata"].get("uid") or "")
        _unpause_unless_paused_in_backup(rtype, obj, proposed)
        if not diff.changed(live, proposed):
            return Planned("unchanged", rtype.kind, namespace, name, path)
        return Planned(
            "change", rtype.kind, namespace, name, path, diff=diff.unified(live, proposed, path)
        )


def _unpause_unless_paused_in_backup(
    rtype: ResourceType, backed_up: Mapping[str, Any], proposed: dict[str, Any]
) -> None:
    """The restore ends by removing the pause of a managed resource not paused in the backup."""
    if "managed" not in rtype.categories:
        return
    if ((backed_up.get("metadata") or {}).get("annotations") or {}).get(meta.PAUSED) == "true":
        return
    metadata = proposed.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    annotations.pop(meta.PAUSED, None)
    if not annotations:
        metadata.pop("annotations", None)
