"""Restore a hosted control plane from a Backup's archive.

The archive is downloaded to a temporary file and verified whole (every
checksum, no path leaving its root) before anything is applied. A
``WebIdentity`` Backup's archive is read as the ServiceAccount its team role
trusts, with a token minted for it (``Restorer``'s ``web_identity``). Objects are
then applied with server-side apply, step by step in the contract's order
(``provider.backup.restore.steps``), waiting for each custom type's CRD to be
Established first; within a step a bounded pool of applies runs at once, and
a step ends before the next begins. Each step reads the archive again, up to
its last object, and parses only its own types, so memory holds a batch of
objects, never the archive.

Managed resources land paused; the last step, ``unpause``, reads them from the
archive again and unpauses each one that was not paused in the backup. What
was paused in the backup is known from the archive alone, so a restore
interrupted by a restart, resumed at the step it reached, keeps that promise.

Before anything is applied, the archive's Crossplane version is held
against the target's (``compat.check``): a target on an older Crossplane minor
is refused, naming both; anything else goes on, and the caller is told what
was found (a newer minor, or versions that could not be checked).

What Crossplane makes again in the target (``source.export.reinstalled``: the
package manager's Lock, what a package revision owns) is skipped, in
archives made before export left it out.

Owner references are rewritten to the restored owners' UIDs, read from the
control plane (an owner not in the archive, or not there yet, is dropped), so
garbage collection never removes restored objects and a resumed restore links
owners restored before the restart.

Progress goes to an optional callback, as ``steps.Progress``: at every
step and after every batch, then Completed or Failed. ``apply_archive`` applies
an archive without a Backup (the ``controlplane-backup`` command line), and
counts objects applied instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import IO, Any

from provider.backup.controllers.backups import (
    BACKUPS,
    COMPLETED,
    StoreFactory,
    check_storage,
    storage_spec,
)
from provider.backup.format import archive
from provider.backup.format.archive import ResourceType
from provider.backup.restore import compat
from provider.backup.restore import steps as restore_steps
from provider.backup.restore.steps import COMPLETED as RESTORE_COMPLETED
from provider.backup.restore.steps import (
    IN_PROGRESS,
    UNPAUSE,
    Step,
    plan,
    resume_point,
)
from provider.backup.source.export import api_resource, owned_by_crossplane, reinstalled, restorable
from provider.backup.source.versions import reported_crossplane
from provider.backup.storage.s3 import (
    STS_AUDIENCE,
    AssumeRoleWith,
    StorageError,
    StorageSpec,
    Store,
)
from provider.backup.storage.tenancy import EndpointPolicy, TenancyError, check_key
from provider.backup.storage.web_identity import (
    IRSA_ANNOTATION,
    POD_IRSA_SOURCE,
    WebIdentityPolicy,
    pod_irsa_role,
)
from provider.kube import (
    CRDS,
    SERVICE_ACCOUNTS,
    Cluster,
    ForbiddenError,
    KubeError,
    NotFoundError,
    ServiceAccountRef,
)
from provider.managed import meta
from provider.runtime.timestamps import format_timestamp

FIELD_MANAGER = "controlplane-restore"
CRD_TIMEOUT_SECONDS = 300.0
CRD_POLL_SECONDS = 1.0
# Requests in flight at once within a step: bounded, so memory stays bounded too.
APPLY_CONCURRENCY = 16
# Objects parsed per call into the worker thread.
PARSE_BATCH = 64
# The lifetime of a web identity token minted for a restore: the download's
# role session is assumed, and renewed, with it (the API's minimum is 600).
WEB_IDENTITY_TOKEN_SECONDS = 3600
# Owners whose UIDs are remembered: many objects share a few owners (a composite
# and its managed resources), so a small cache saves most reads, at a fixed size.
OWNER_CACHE = 1024

ProgressHook = Callable[[restore_steps.Progress], Awaitable[None]]
# Told what the version check found, before anything is applied (refused or not).
CheckHook = Callable[[compat.Compatibility], Awaitable[None]]
# Told how many more objects were applied, after each batch.
Progress = Callable[[int], None]
# (apiVersion, kind, namespace, name) of an object; an empty namespace when cluster-scoped.
ObjectKey = tuple[str, str, str, str]

log = logging.getLogger(__name__)


class RestoreError(Exception):
    """A restore cannot go on; the message is safe to show and nothing more was applied."""


@dataclass(frozen=True)
class Outcome:
    """What a restore applied."""

    objects: int


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


class _HashingFile:
    """A file that hashes what is written to it."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.file.write(data)


def scratch_free_bytes() -> int:
    """Bytes free in the folder temporary files go to (``TMPDIR``)."""
    return shutil.disk_usage(tempfile.gettempdir()).free


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
        concurrency: int = APPLY_CONCURRENCY,
        web_identity: ServiceAccountRef | None = None,
        scratch_free: Callable[[], int] = scratch_free_bytes,
        web_identity_roles: WebIdentityPolicy | None = None,
    ) -> None:
        """``local`` holds the Backups; ``endpoints`` are the S3 endpoints the operator allows.

        ``scratch_free`` tells how many bytes the scratch space (``TMPDIR``, where
        an archive is downloaded to) has free: an archive larger is refused
        before its download starts, rather than failing when the volume is full.

        ``web_identity`` is the ServiceAccount whose identity reads a
        ``WebIdentity`` Backup's archive: the one its team role trusts, the
        backup controller's. None: the provider's own projected token.
        ``web_identity_roles`` are the roles such a Backup may name; by default
        none, so a ``WebIdentity`` Backup is refused and no token is minted. With
        ``irsa_default`` and no account, the account of the IRSA role of
        ``web_identity`` (its annotation) is allowed, read at each restore.
        """
        self.local = local
        self.store = store
        self.crd_timeout = crd_timeout
        self.endpoints = endpoints or EndpointPolicy()
        self.limits = limits or archive.Limits()
        self.concurrency = concurrency
        self.web_identity = web_identity
        self.scratch_free = scratch_free
        self.web_identity_roles = web_identity_roles or WebIdentityPolicy()

    async def restore(
        self,
        namespace: str,
        backup_name: str,
        kubeconfig: Mapping[str, Any],
        *,
        progress: ProgressHook | None = None,
        recorded: Mapping[str, Any] | None = None,
        target_crossplane: str = "",
        on_check: CheckHook | None = None,
    ) -> Outcome:
        """Restore Backup ``namespace/backup_name`` into the cluster of ``kubeconfig``.

        Args:
            namespace: the Backup's namespace.
            backup_name: the Backup's name.
            kubeconfig: the target control plane's kubeconfig, parsed.
            progress: told where the restore stands, at every step and batch, then at its end.
            recorded: what an earlier run of this restore recorded (``Progress.record()``);
                a run of the same Backup that stopped at a step resumes at that step.
            target_crossplane: the Crossplane version the target runs, as its Space says
                (empty: what the target itself reports, if anything; see ``source_versions``).
            on_check: told what the version check found, before anything is applied.

        Raises:
            RestoreError: the Backup, its archive or the target refuses; the
                message says which.
            KubeError: the local cluster or the target cannot be reached.
        """
        report = _Reporter(
            progress,
            restore_steps.Progress(
                backup_name, IN_PROGRESS, "", 0, 0, str((recorded or {}).get("startedAt") or _now())
            ),
        )
        try:
            return await self._restore(
                namespace,
                backup_name,
                kubeconfig,
                report,
                recorded,
                version_check=_Check(target_crossplane, on_check),
            )
        except (RestoreError, KubeError) as error:
            await report.send(report.last.failed(str(error)))
            raise

    async def _restore(
        self,
        namespace: str,
        backup_name: str,
        kubeconfig: Mapping[str, Any],
        report: _Reporter,
        recorded: Mapping[str, Any] | None,
        *,
        version_check: _Check,
    ) -> Outcome:
        storage, key, sha256, size = await self._archive_of(namespace, backup_name)
        free = await asyncio.to_thread(self.scratch_free)
        if size > free:
            msg = (
                f"the archive of Backup {backup_name} ({size} bytes) does not fit in the "
                f"provider's scratch space ({free} bytes free)"
            )
            raise RestoreError(msg)
        spec = await self._storage_spec(storage, namespace)
        with tempfile.TemporaryFile() as file:
            try:
                digest = await asyncio.to_thread(self._download, spec, key, size, file)
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
            with manifest:
                steps = plan(manifest.types, manifest.counts)
                first = resume_point(steps, recorded, backup_name).step
                if first:
                    log.info(
                        "restore resumes",
                        extra={"fields": {"backup": backup_name, "step": steps[first].name}},
                    )
                target = await Cluster.from_kubeconfig(kubeconfig)
                try:
                    await version_check.run(target, manifest.source.crossplane)
                    await _Apply(
                        target, file, manifest, self.crd_timeout, self.limits, self.concurrency
                    ).run(steps, first, report)
                except archive.ArchiveError as error:
                    msg = f"the archive of Backup {backup_name} is refused: {error}"
                    raise RestoreError(msg) from None
                finally:
                    await target.close()
        await report.send(
            replace(report.last, phase=RESTORE_COMPLETED, step=UNPAUSE, completed_at=_now())
        )
        return Outcome(objects=manifest.objects)

    async def _archive_of(
        self, namespace: str, backup_name: str
    ) -> tuple[Mapping[str, Any], str, str, int]:
        """A Completed Backup's storage, archive key, sha256 and size; RestoreError if refused."""
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
        spec = storage_spec(storage, namespace)
        try:
            check_storage(backup, self.endpoints)
            check_key(str(storage.get("prefix") or ""), key)
            if spec.assume_role_with == AssumeRoleWith.WEB_IDENTITY:
                # Before any token is read or minted for it.
                policy = await self._web_identity_policy()
                policy.check_role(spec.role_arn, namespace, str(storage.get("prefix") or ""))
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
        return storage, key, sha256, size

    async def _web_identity_policy(self) -> WebIdentityPolicy:
        """The roles a WebIdentity Backup may name, given the web identity's own IRSA role.

        That role is the one EKS gives the ServiceAccount whose token is minted (its
        ``eks.amazonaws.com/role-arn`` annotation), or with no account to borrow the
        provider's own (``AWS_ROLE_ARN``). The annotation is read, never a token
        minted, before the role is checked; a ServiceAccount that cannot be read
        refuses the restore only when the policy needs its role (no account listed).
        """
        policy = self.web_identity_roles
        account = self.web_identity
        if account is None:
            return policy.resolved(pod_irsa_role(os.environ), POD_IRSA_SOURCE)
        source = f"the {IRSA_ANNOTATION} annotation of ServiceAccount {account}"
        try:
            found = await self.local.get(SERVICE_ACCOUNTS, account.namespace, account.name)
        except KubeError as error:
            if policy.accounts or not policy.irsa_default:
                return policy
            why = (
                "forbidden (the provider's RBAC must allow get on it)"
                if isinstance(error, ForbiddenError)
                else str(error)
            )
            msg = f"cannot read ServiceAccount {account}, whose IRSA role is the default: {why}"
            raise RestoreError(msg) from None
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        return policy.resolved(str(annotations.get(IRSA_ANNOTATION) or ""), source)

    async def _storage_spec(self, storage: Mapping[str, Any], namespace: str) -> StorageSpec:
        """The Backup's storage; a ``WebIdentity`` one with a token of ``web_identity``.

        An irsa team role trusts one subject, the backup controller's
        ServiceAccount, never the provider's own. As EKS's pod identity webhook
        projects a token for a pod, the provider asks the TokenRequest API for
        one of that account, for STS's audience only: the API server takes no
        token of that audience, so it reaches STS as that account and nothing
        in the cluster.
        """
        spec = storage_spec(storage, namespace)
        account = self.web_identity
        if account is None or spec.assume_role_with != AssumeRoleWith.WEB_IDENTITY:
            return spec
        try:
            token = await self.local.service_account_token(
                account, audiences=[STS_AUDIENCE], expiration_seconds=WEB_IDENTITY_TOKEN_SECONDS
            )
        except KubeError as error:
            msg = f"cannot get a web identity token for ServiceAccount {account}: {_why(error)}"
            raise RestoreError(msg) from None
        return replace(spec, web_identity_token=token)

    def _download(self, spec: StorageSpec, key: str, size: int, file: IO[bytes]) -> str:
        """Stream the archive into ``file``, never more than its recorded ``size``."""
        sink = _HashingFile(file)
        self.store(spec).download(key, sink, limit=size)
        return sink.digest.hexdigest()


@dataclass(frozen=True)
class _Check:
    """The version check of one restore: the target's version if known, and who is told."""

    target_crossplane: str
    hook: CheckHook | None

    async def run(self, target: Cluster, archived: str) -> None:
        """Hold ``archived`` against the target's version; RestoreError when refused."""
        found = await target_compatibility(target, archived, self.target_crossplane)
        if self.hook is not None:
            await self.hook(found)
        if not found.allowed:
            raise RestoreError(found.message)


async def target_compatibility(
    target: Cluster, archived: str, target_crossplane: str = ""
) -> compat.Compatibility:
    """``compat.check`` of an archive's Crossplane version against the target's.

    ``target_crossplane`` is the Space's word; without it, what the target
    itself reports (its Crossplane Deployment), if anything. Only an archive
    that records a version needs the target's.
    """
    if archived and not target_crossplane:
        target_crossplane = (await reported_crossplane(target)).crossplane
    return compat.check(archived, target_crossplane)


def _why(error: KubeError) -> str:
    """Why a token could not be minted, as an operator can act on it."""
    if isinstance(error, ForbiddenError):
        return "forbidden (the provider's RBAC must allow create on its serviceaccounts/token)"
    if isinstance(error, NotFoundError):
        return "no such ServiceAccount"
    return str(error)


class _Reporter:
    """Hands progress to the caller's hook, and remembers the last for a failure to name."""

    def __init__(self, hook: ProgressHook | None, first: restore_steps.Progress) -> None:
        self.hook = hook
        self.last = first

    async def send(self, progress: restore_steps.Progress) -> None:
        self.last = progress
        if self.hook is not None:
            await self.hook(progress)


Batch = list[tuple[ResourceType, dict[str, Any]]]


def repoint_owners(metadata: dict[str, Any], uids: Mapping[ObjectKey, str]) -> None:
    """Point owner references at the owners' UIDs in ``uids``; drop those not there.

    An owner is in its dependent's namespace or cluster-scoped. The restore itself
    reads owners' UIDs from the control plane; a dry run, which creates nothing,
    keeps the UIDs it plans in a map.
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
    _set_owners(metadata, owners)


def _set_owners(metadata: dict[str, Any], owners: list[dict[str, Any]]) -> None:
    """The owner references kept, or none at all."""
    if owners:
        metadata["ownerReferences"] = owners
    else:
        metadata.pop("ownerReferences", None)


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
    contract's order, step by step, then managed resources are unpaused.

    Raises:
        RestoreError: the target or the archive refuses; the message says which.
    """
    counted = 0

    async def count(reached: restore_steps.Progress) -> None:
        nonlocal counted
        if progress is not None and reached.applied > counted:
            progress(reached.applied - counted)
        counted = max(counted, reached.applied)

    steps = plan(manifest.types, manifest.counts)
    first = restore_steps.Progress("", IN_PROGRESS, "", 0, manifest.objects, _now())
    apply = _Apply(
        target, file, manifest, crd_timeout, limits or archive.Limits(), APPLY_CONCURRENCY
    )
    try:
        await apply.run(steps, 0, _Reporter(count, first))
    except archive.ArchiveError as error:
        msg = f"the archive is refused: {error}"
        raise RestoreError(msg) from None
    return Outcome(objects=manifest.objects)


async def parsed_batches(
    file: IO[bytes],
    manifest: archive.Manifest,
    folders: Collection[str],
    *,
    size: int = PARSE_BATCH,
    limits: archive.Limits | None = None,
) -> AsyncIterator[Batch]:
    """The objects of ``folders`` in a verified archive, ``size`` at a time.

    Decompressing and parsing run in a worker thread, a batch per call, so the
    event loop (every other reconcile, the leader Lease's renewal) never waits on
    an archive, however many objects it holds. Objects of other folders are
    checked but not parsed. Reading stops at the last object of ``folders``:
    every file up to it is checked, and the files after it are checked by the
    pass that needs them, so no object is used unchecked.
    """
    reader = archive.objects(file, manifest, limits=limits, folders=folders)
    wanted = sum(count for folder, count in manifest.counts.items() if folder in folders)

    def take() -> Batch:
        nonlocal wanted
        batch: Batch = []
        while wanted > 0 and len(batch) < size:
            item = next(reader, None)
            if item is None:
                break
            batch.append(item)
            wanted -= 1
        return batch

    while batch := await asyncio.to_thread(take):
        yield batch


class _Apply:
    """The steps of one restore over a verified archive."""

    def __init__(  # noqa: PLR0917 (the restore's parts, passed once)
        self,
        target: Cluster,
        file: IO[bytes],
        manifest: archive.Manifest,
        crd_timeout: float,
        limits: archive.Limits,
        concurrency: int,
    ) -> None:
        self.target = target
        self.file = file
        self.manifest = manifest
        self.crd_timeout = crd_timeout
        self.limits = limits
        self.concurrency = concurrency
        self.established: set[str] = set()
        # (apiVersion, kind) -> the archive's type of that kind, to find an owner's path.
        self.kinds = {(t.api_version, t.kind): t for t in manifest.types.values()}
        # (apiVersion, kind, namespace, name) -> UID of an owner in the control plane.
        self.owner_uids: OrderedDict[tuple[str, str, str, str], str] = OrderedDict()

    async def run(self, steps: list[Step], first: int, report: _Reporter) -> None:
        total = self.manifest.objects
        applied = sum(step.objects for step in steps[:first])
        for step in steps[first:]:
            at_step = replace(report.last, step=step.name, applied=applied, total=total)
            await report.send(at_step)
            if step.name == UNPAUSE:
                await self._unpause()
                continue
            for folder in sorted(step.folders):
                await self._wait_for_type(self.manifest.types[folder])
            self.file.seek(0)
            batches = parsed_batches(self.file, self.manifest, step.folders, limits=self.limits)
            # A step ends before the next begins: owners land before what they own.
            async for done in self._pooled(batches, self._apply):
                applied += done
                await report.send(replace(report.last, applied=applied))

    async def _pooled(
        self,
        batches: AsyncIterator[Batch],
        work: Callable[[ResourceType, dict[str, Any]], Coroutine[Any, Any, None]],
    ) -> AsyncIterator[int]:
        """Run ``work`` on every object, ``concurrency`` at once; how many finished, per batch.

        The first failure is raised once the work in flight has stopped.
        """
        pool = _Pool(self.concurrency)
        try:
            async for batch in batches:
                for rtype, obj in batch:
                    await pool.submit(work(rtype, obj))
                yield pool.take_finished()
            await pool.drain()
            yield pool.take_finished()
        finally:
            await pool.stop()

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
        if reinstalled(rtype, obj) is not None:
            # In archives made before export left it out: Crossplane makes it again.
            return
        metadata = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        namespace = str(metadata.get("namespace") or "")
        owners = []
        for owner in metadata.get("ownerReferences") or []:
            uid = await self._owner_uid(owner, namespace)
            if uid:
                owners.append({**owner, "uid": uid})
        _set_owners(metadata, owners)
        annotations = metadata.setdefault("annotations", {})
        if rtype.managed:
            annotations[meta.PAUSED] = "true"
        if not annotations:
            metadata.pop("annotations")
        try:
            await self.target.apply(api_resource(rtype), obj, field_manager=FIELD_MANAGER)
        except KubeError as error:
            msg = f"cannot apply {rtype.kind} {namespace}/{metadata['name']}: {error}"
            raise RestoreError(msg) from None

    async def _owner_uid(self, owner: Mapping[str, Any], namespace: str) -> str | None:
        """The UID of a restored owner in the control plane; None if it is not restored."""
        rtype = self.kinds.get((str(owner.get("apiVersion")), str(owner.get("kind"))))
        name = str(owner.get("name"))
        if rtype is None:
            return None
        scope = namespace if rtype.namespaced else ""
        key = (rtype.api_version, rtype.kind, scope, name)
        cached = self.owner_uids.get(key)
        if cached is not None:
            self.owner_uids.move_to_end(key)
            return cached
        try:
            path = archive.member_path(rtype, {"metadata": {"name": name, "namespace": scope}})
        except archive.ArchiveError:
            return None
        if path not in self.manifest.files:
            return None
        found = await self.target.get(api_resource(rtype), scope or None, name)
        uid = str(((found or {}).get("metadata") or {}).get("uid") or "")
        if not uid:
            return None
        self.owner_uids[key] = uid
        if len(self.owner_uids) > OWNER_CACHE:
            self.owner_uids.popitem(last=False)
        return uid

    async def _unpause(self) -> None:
        """Unpause every managed resource that was not paused in the backup."""
        folders = {f for f, t in self.manifest.types.items() if t.managed}
        if not folders:
            return
        self.file.seek(0)
        batches = parsed_batches(self.file, self.manifest, folders, limits=self.limits)
        async for _ in self._pooled(batches, self._unpause_one):
            pass

    async def _unpause_one(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        paused = (metadata.get("annotations") or {}).get(meta.PAUSED) == "true"
        if paused or reinstalled(rtype, obj) is not None:
            return
        patch = {"metadata": {"annotations": {meta.PAUSED: None}}}
        namespace = str(metadata.get("namespace") or "")
        try:
            await self.target.merge_patch(
                api_resource(rtype), namespace or None, metadata["name"], patch
            )
        except NotFoundError:
            # Deleted in the control plane since it was applied: nothing is paused.
            return
        except KubeError as error:
            msg = f"cannot unpause {rtype.kind} {namespace}/{metadata['name']}: {error}"
            raise RestoreError(msg) from None


class _Pool:
    """At most ``size`` coroutines at once; each costs one slot and one callback."""

    def __init__(self, size: int) -> None:
        self.slots = asyncio.Semaphore(size)
        self.running: set[asyncio.Task[None]] = set()
        self.finished = 0
        self.failure: BaseException | None = None

    async def submit(self, work: Coroutine[Any, Any, None]) -> None:
        """Start ``work`` once a slot is free; raise the first failure so far instead."""
        await self.slots.acquire()
        if self.failure is not None:
            work.close()
            self.slots.release()
            raise self.failure
        task = asyncio.create_task(work)
        self.running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.slots.release()
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            self.finished += 1
        elif self.failure is None:
            self.failure = error

    def take_finished(self) -> int:
        """How many finished since the last call."""
        finished, self.finished = self.finished, 0
        return finished

    async def drain(self) -> None:
        """Wait for the work in flight; raise the first failure."""
        while self.running:
            await asyncio.wait(set(self.running))
        if self.failure is not None:
            raise self.failure

    async def stop(self) -> None:
        """Cancel the work in flight (after a failure or a cancellation) and wait for it."""
        for task in self.running:
            task.cancel()
        if self.running:
            await asyncio.wait(set(self.running))
