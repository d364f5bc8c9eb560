"""Restore a hosted control plane from a Backup's archive.

The archive is downloaded to a temporary file and verified whole (every
checksum, no path leaving its root) before anything is applied. Objects are
then applied with server-side apply in the contract's order, waiting for each
custom type's CRD to be Established first; managed resources land paused and
are unpaused at the end unless they were paused in the backup. Owner
references are rewritten to the restored owners' new UIDs (an owner not
restored is dropped), so garbage collection never removes restored objects.
Running it again gives the same result, so a restore interrupted by a
provider restart is simply run again.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from provider.backup import archive
from provider.backup.archive import ResourceType
from provider.backup.backups import BACKUPS, COMPLETED, StoreFactory, check_storage, storage_spec
from provider.backup.export import api_resource, owned_by_crossplane, restorable
from provider.backup.storage import StorageError, Store
from provider.backup.tenancy import EndpointPolicy, TenancyError, check_key
from provider.kube import CRDS, Cluster, KubeError
from provider.managed import meta

FIELD_MANAGER = "controlplane-restore"
CRD_TIMEOUT_SECONDS = 300.0
CRD_POLL_SECONDS = 1.0
# Objects applied at once within a step: bounded, so memory stays bounded too.
APPLY_CONCURRENCY = 16
# Within the contract's last phase: claims, then composites, then managed resources.
_CATEGORY_ORDER = ("claim", "composite", "managed")


class RestoreError(Exception):
    """A restore cannot go on; the message is safe to show and nothing more was applied."""


@dataclass(frozen=True)
class Outcome:
    """What a restore applied."""

    objects: int


def order(rtype: ResourceType) -> tuple[int, int]:
    """The contract's order: namespaces, configmaps, secrets, packages, XRDs, then the rest."""
    within = next(
        (i for i, category in enumerate(_CATEGORY_ORDER) if category in rtype.categories),
        len(_CATEGORY_ORDER),
    )
    return archive.restore_phase(rtype), within


def _is_managed(rtype: ResourceType) -> bool:
    return "managed" in rtype.categories


class _HashingFile:
    """A file that hashes what is written to it."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.file.write(data)


class Restorer:
    """Restores Backups of the local cluster into hosted control planes."""

    def __init__(
        self,
        local: Cluster,
        *,
        store: StoreFactory = Store.connect,
        crd_timeout: float = CRD_TIMEOUT_SECONDS,
        endpoints: EndpointPolicy | None = None,
        limits: archive.Limits | None = None,
    ) -> None:
        """``local`` holds the Backups; ``endpoints`` are the S3 endpoints the operator allows."""
        self.local = local
        self.store = store
        self.crd_timeout = crd_timeout
        self.endpoints = endpoints or EndpointPolicy()
        self.limits = limits or archive.Limits()

    async def restore(
        self, namespace: str, backup_name: str, kubeconfig: Mapping[str, Any]
    ) -> Outcome:
        """Restore Backup ``namespace/backup_name`` into the cluster of ``kubeconfig``.

        Raises:
            RestoreError: the Backup, its archive or the target refuses; the
                message says which.
        """
        backup = await self.local.get(BACKUPS, namespace, backup_name)
        if backup is None:
            msg = f"Backup {namespace}/{backup_name} not found"
            raise RestoreError(msg)
        status = backup.get("status") or {}
        if status.get("phase") != COMPLETED:
            phase = status.get("phase") or "not started"
            msg = f"Backup {namespace}/{backup_name} is {phase}, not Completed"
            raise RestoreError(msg)
        key = str((status.get("location") or {}).get("key") or "")
        storage = backup["spec"].get("storage") or {}
        try:
            check_storage(backup, self.endpoints)
            check_key(str(storage.get("prefix") or ""), key)
        except TenancyError as error:
            msg = f"Backup {namespace}/{backup_name} is refused: {error}"
            raise RestoreError(msg) from None
        sha256, size = status.get("sha256"), status.get("size")
        if not isinstance(sha256, str) or not isinstance(size, int) or size < 0:
            msg = (
                f"Backup {namespace}/{backup_name} is refused: a Completed Backup records "
                "status.sha256 and status.size"
            )
            raise RestoreError(msg)
        if size > self.limits.max_archive_bytes:
            msg = (
                f"Backup {namespace}/{backup_name} is refused: status.size is above the "
                f"limit of {self.limits.max_archive_bytes} bytes"
            )
            raise RestoreError(msg)
        with tempfile.TemporaryFile() as file:
            try:
                digest = await asyncio.to_thread(
                    self._download, storage, namespace, key, size, file
                )
            except StorageError as error:
                msg = f"cannot fetch the archive of Backup {backup_name}: {error}"
                raise RestoreError(msg) from None
            if digest != sha256:
                msg = f"the archive of Backup {backup_name} does not match its recorded sha256"
                raise RestoreError(msg)
            file.seek(0)
            try:
                manifest = await asyncio.to_thread(
                    archive.verify, file, limits=self.limits, admit=restorable
                )
            except archive.ArchiveError as error:
                msg = f"the archive of Backup {backup_name} is refused: {error}"
                raise RestoreError(msg) from None
            target = await Cluster.from_kubeconfig(kubeconfig)
            try:
                count = await _Apply(target, file, manifest, self.crd_timeout, self.limits).run()
            except archive.ArchiveError as error:
                msg = f"the archive of Backup {backup_name} is refused: {error}"
                raise RestoreError(msg) from None
            finally:
                await target.close()
        return Outcome(objects=count)

    def _download(
        self, storage: Mapping[str, Any], namespace: str, key: str, size: int, file: IO[bytes]
    ) -> str:
        """Stream the archive into ``file``, never more than its recorded ``size``."""
        sink = _HashingFile(file)
        self.store(storage_spec(storage, namespace)).download(key, sink, limit=size)
        return sink.digest.hexdigest()


Batch = list[tuple[ResourceType, dict[str, Any]]]
# (apiVersion, kind, namespace, name) of an object; an empty namespace when cluster-scoped.
ObjectKey = tuple[str, str, str, str]


def repoint_owners(metadata: dict[str, Any], uids: Mapping[ObjectKey, str]) -> None:
    """Point owner references at the restored owners' new UIDs; drop those not restored.

    An owner is in its dependent's namespace or cluster-scoped, so garbage
    collection never takes a restored object for an orphan.
    """
    namespace = str(metadata.get("namespace") or "")
    owners = []
    for owner in metadata.get("ownerReferences") or []:
        api_version, kind = str(owner.get("apiVersion")), str(owner.get("kind"))
        name = str(owner.get("name"))
        uid = uids.get((api_version, kind, namespace, name)) or uids.get(
            (api_version, kind, "", name)
        )
        if uid:
            owners.append({**owner, "uid": uid})
    if owners:
        metadata["ownerReferences"] = owners
    else:
        metadata.pop("ownerReferences", None)


# Told how many more objects were applied, after each batch.
Progress = Callable[[int], None]


async def apply_archive(
    target: Cluster,
    file: IO[bytes],
    manifest: archive.Manifest,
    *,
    crd_timeout: float = CRD_TIMEOUT_SECONDS,
    limits: archive.Limits | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """Apply an archive that ``archive.verify`` (with ``admit=restorable``) accepted.

    The same apply as a Backup's restore, without a Backup: ``file`` holds the
    archive ``manifest`` describes, and its objects go into ``target`` in the
    contract's order.

    Raises:
        RestoreError: the target or the archive refuses; the message says which.
    """
    try:
        count = await _Apply(
            target, file, manifest, crd_timeout, limits or archive.Limits(), progress=progress
        ).run()
    except archive.ArchiveError as error:
        msg = f"the archive is refused: {error}"
        raise RestoreError(msg) from None
    return Outcome(objects=count)


async def parsed_batches(
    file: IO[bytes],
    manifest: archive.Manifest,
    folders: set[str],
    *,
    size: int = APPLY_CONCURRENCY,
    limits: archive.Limits | None = None,
) -> AsyncIterator[Batch]:
    """The objects of ``folders`` in a verified archive, ``size`` at a time.

    Decompressing and parsing run in a worker thread, a batch per call, so the
    event loop (every other reconcile, the leader Lease's renewal) never waits on
    an archive, however many objects it holds.
    """
    reader = archive.objects(file, manifest, limits=limits)

    def take() -> Batch:
        batch: Batch = []
        for rtype, obj in reader:
            if rtype.folder in folders:
                batch.append((rtype, obj))
                if len(batch) >= size:
                    break
        return batch

    while batch := await asyncio.to_thread(take):
        yield batch


class _Apply:
    """One pass per phase over a verified archive."""

    def __init__(
        self,
        target: Cluster,
        file: IO[bytes],
        manifest: archive.Manifest,
        crd_timeout: float,
        limits: archive.Limits,
        *,
        progress: Progress | None = None,
    ) -> None:
        self.target = target
        self.progress = progress
        self.file = file
        self.manifest = manifest
        self.crd_timeout = crd_timeout
        self.limits = limits
        self.established: set[str] = set()
        # Each restored object -> its new UID.
        self.uids: dict[ObjectKey, str] = {}
        self.to_unpause: list[tuple[ResourceType, str, str]] = []

    async def run(self) -> int:
        count = 0
        for step in sorted({order(t) for t in self.manifest.types.values()}):
            types = {folder for folder, t in self.manifest.types.items() if order(t) == step}
            for folder in sorted(types):
                await self._wait_for_type(self.manifest.types[folder])
            self.file.seek(0)
            # A step ends before the next begins: owners land before what they own.
            async for batch in parsed_batches(self.file, self.manifest, types, limits=self.limits):
                await asyncio.gather(*(self._apply(rtype, obj) for rtype, obj in batch))
                count += len(batch)
                if self.progress is not None:
                    self.progress(len(batch))
        patch = {"metadata": {"annotations": {meta.PAUSED: None}}}
        for start in range(0, len(self.to_unpause), APPLY_CONCURRENCY):
            await asyncio.gather(
                *(
                    self.target.merge_patch(api_resource(rtype), namespace or None, name, patch)
                    for rtype, namespace, name in self.to_unpause[start : start + APPLY_CONCURRENCY]
                )
            )
        return count

    async def _wait_for_type(self, rtype: ResourceType) -> None:
        """A custom type can only be applied once its CRD is Established."""
        if not rtype.group or rtype.folder in self.established:
            return
        name = f"{rtype.resource}.{rtype.group}"
        deadline = asyncio.get_running_loop().time() + self.crd_timeout
        while True:
            crd = await self.target.get(CRDS, None, name)
            conditions = ((crd or {}).get("status") or {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                if crd is None or not owned_by_crossplane(crd):
                    msg = (
                        f"CustomResourceDefinition {name} is not Crossplane's nor owned by a "
                        "package or an XRD in the control plane: its objects are not restored"
                    )
                    raise RestoreError(msg)
                self.established.add(rtype.folder)
                return
            if asyncio.get_running_loop().time() > deadline:
                msg = f"CustomResourceDefinition {name} is not Established in the control plane"
                raise RestoreError(msg)
            await asyncio.sleep(CRD_POLL_SECONDS)

    async def _apply(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        metadata = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        repoint_owners(metadata, self.uids)
        annotations = metadata.setdefault("annotations", {})
        if _is_managed(rtype):
            if annotations.get(meta.PAUSED) != "true":
                self.to_unpause.append(
                    (rtype, str(metadata.get("namespace") or ""), metadata["name"])
                )
            annotations[meta.PAUSED] = "true"
        if not annotations:
            metadata.pop("annotations")
        try:
            applied = await self.target.apply(api_resource(rtype), obj, field_manager=FIELD_MANAGER)
        except KubeError as error:
            where = f"{metadata.get('namespace', '')}/{metadata['name']}"
            msg = f"cannot apply {rtype.kind} {where}: {error}"
            raise RestoreError(msg) from None
        self.uids[
            (rtype.api_version, rtype.kind, str(metadata.get("namespace") or ""), metadata["name"])
        ] = str((applied.get("metadata") or {}).get("uid", ""))
