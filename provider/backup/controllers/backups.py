"""The Backup controller: one archive of a hosted control plane, streamed to S3.

A Backup is a one-shot object: Pending, then InProgress, then Completed or
Failed, never run again once finished. A failed attempt aborts its multipart
upload and is retried with backoff up to ``MAX_ATTEMPTS``; nothing is marked
Completed without a complete object.

Deleting a Backup deletes its archive only under ``deletionPolicy: Delete``
(``retention`` says which policy is in force; such a Backup holds a
finalizer for it), and not when its controlling schedule is being deleted or
gone: a Backup deleted by the garbage collector's cascade keeps its archive,
which the bucket's lifecycle rule expires. A finished Backup with a ttl is
looked at again when it expires, and then deleted with its archive.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provider import kube
from provider import kubeconfig as kubeconfig_rules
from provider.backup.controllers.last_backup import BACKUP_FAILED
from provider.backup.controllers.retention import (
    DeletionPolicy,
    deletion_policy,
    expires_at,
    read_life,
)
from provider.backup.format.archive import Summary
from provider.backup.source.connection_secret import (
    CONTROL_PLANE_HOST_NOT_ALLOWED,
    KUBECONFIG_NOT_ALLOWED,
    SourceRefusedError,
    check_connection_secret,
    connection_secret_name,
)
from provider.backup.source.export import ReadLimits, write_archive
from provider.backup.storage.s3 import AssumeRoleWith, StorageError, StorageSpec, Store
from provider.backup.storage.tenancy import EndpointPolicy, TenancyError, check_prefix
from provider.backup.storage.web_identity import WebIdentityPolicy
from provider.events import EventRecorder
from provider.kube import Cluster, KubeError, LimitExceededError, Resource
from provider.kubeconfig import ControlPlaneHosts, HostPattern, HostPatternError, KubeconfigError
from provider.managed.reconciler import Result
from provider.model import (
    CLUSTER_PROVIDER_CONFIGS,
    GROUP,
    INSTANCES,
    KUBECONFIG_KEY,
    PROVIDER_CONFIGS,
    VERSION,
    InstanceSpec,
    InvalidError,
    ProviderConfigSpec,
    ProviderConfigStatus,
    credentials_namespace,
    parse,
)
from provider.runtime import metrics
from provider.runtime.durations import format_go_duration
from provider.runtime.timestamps import format_timestamp

BACKUPS = Resource(GROUP, VERSION, "backups", "Backup")
BACKUP_SCHEDULES = Resource(GROUP, VERSION, "backupschedules", "BackupSchedule")
ARCHIVE_FINALIZER = "controlplane.spaces.upbound.io/archive"
# On every Backup a BackupSchedule makes: the schedule's name (its failures are
# counted per schedule).
SCHEDULE_LABEL = "controlplane.spaces.upbound.io/schedule"
MAX_ATTEMPTS = 3
# How long one attempt may read a control plane and write its archive.
DEFAULT_DEADLINE_SECONDS = 30 * 60.0
DEADLINE_EXCEEDED = "DeadlineExceeded"
# Refused before it ran: storage outside the namespace's prefix or the operator's
# rules (endpoints, web identity roles), or a spec that cannot be read.
STORAGE_REFUSED = "StorageRefused"
INVALID_SPEC = "InvalidSpec"
PENDING, IN_PROGRESS, COMPLETED, FAILED = "Pending", "InProgress", "Completed", "Failed"

log = logging.getLogger(__name__)

StoreFactory = Callable[[StorageSpec], Store]


class BackupError(Exception):
    """A backup cannot be made; the message is safe to show."""


def storage_spec(storage: Mapping[str, Any], namespace: str) -> StorageSpec:
    """A Backup's or schedule's ``spec.storage`` as a StorageSpec bound to its namespace.

    The namespace is the ExternalId of the role assumption: each team's role
    trusts only its own namespace's (see ``storage.tenancy``).
    """
    return StorageSpec(
        bucket=str(storage.get("bucket") or ""),
        region=str(storage.get("region") or ""),
        role_arn=str(storage.get("roleArn") or ""),
        endpoint=str(storage.get("endpoint") or ""),
        external_id=namespace,
        assume_role_with=str(storage.get("assumeRoleWith") or AssumeRoleWith.ASSUME_ROLE),
    )


def check_storage(obj: Mapping[str, Any], endpoints: EndpointPolicy) -> None:
    """Refuse a Backup's or schedule's storage outside its namespace's prefix or allowed endpoints.

    Raises:
        TenancyError: naming the field and the rule.
    """
    storage = (obj.get("spec") or {}).get("storage") or {}
    check_prefix(str(obj["metadata"]["namespace"]), str(storage.get("prefix") or ""))
    endpoints.check(str(storage.get("endpoint") or ""))


def archive_key(backup: Mapping[str, Any]) -> str:
    """``<prefix><backup-name>.tar.gz``."""
    prefix = str((backup["spec"].get("storage") or {}).get("prefix") or "")
    return f"{prefix}{backup['metadata']['name']}.tar.gz"


def _now(clock: Callable[[], datetime]) -> str:
    return format_timestamp(clock())


def _set_condition(
    status: dict[str, Any],
    type_: str,
    reason: str,
    message: str,
    now: str,
    *,
    value: str = "True",
) -> None:
    """Set the one outcome condition (Completed or Failed), replacing the other."""
    conditions = [
        c for c in status.get("conditions") or [] if c.get("type") not in ("Completed", "Failed")
    ]
    condition = {"type": type_, "status": value, "reason": reason, "lastTransitionTime": now}
    if message:
        condition["message"] = message
    status["conditions"] = [*conditions, condition]


@dataclass(frozen=True)
class Target:
    """Where to read the control plane from."""

    kubeconfig: dict[str, Any]
    instance: str
    # What the Space says the control plane runs (status.atProvider.crossplaneVersion).
    crossplane_version: str = ""


class BackupReconciler:
    """Runs each Backup once."""

    def __init__(
        self,
        local: Cluster,
        *,
        store: StoreFactory = Store.connect,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        endpoints: EndpointPolicy | None = None,
        web_identity_roles: WebIdentityPolicy | None = None,
        controlplane_hosts: ControlPlaneHosts | None = None,
        limits: ReadLimits | None = None,
        deadline: float = DEFAULT_DEADLINE_SECONDS,
    ) -> None:
        """``local`` holds the Backups and Instances; ``store`` connects to S3.

        ``endpoints`` are the S3 endpoints the operator allows; none by default,
        so only AWS's own (or the operator's ``AWS_ENDPOINT_URL*``) is used.
        ``web_identity_roles`` are the roles a ``WebIdentity`` Backup may name;
        none by default, so such a Backup is refused.
        ``controlplane_hosts`` are the hosts a control plane's kubeconfig may name;
        none given, the host of the Space of the Instance's provider config.
        ``limits`` bound what an export reads, ``deadline`` (seconds) how long it runs.
        """
        self.local = local
        self.store = store
        self.clock = clock
        self.endpoints = endpoints or EndpointPolicy()
        self.web_identity_roles = web_identity_roles or WebIdentityPolicy()
        self.controlplane_hosts = controlplane_hosts or ControlPlaneHosts()
        self.limits = limits or ReadLimits()
        self.deadline = deadline
        self.events = EventRecorder(local, "controlplane-backup-controller")

    async def reconcile(self, namespace: str, name: str) -> Result:
        """Take the Backup one step further."""
        backup = await self.local.get(BACKUPS, namespace, name)
        if backup is None:
            return Result()
        if backup["metadata"].get("deletionTimestamp"):
            return await self._delete(backup)
        status = backup.setdefault("status", {})
        if status.get("phase") in (COMPLETED, FAILED):
            return await self._finished(backup)
        try:
            check_storage(backup, self.endpoints)
            self._check_role(backup)
            life = read_life(backup)
        except TenancyError as error:
            return await self._refused(backup, STORAGE_REFUSED, str(error))
        except ValueError as error:
            return await self._refused(backup, INVALID_SPEC, str(error))
        finalizers = backup["metadata"].setdefault("finalizers", [])
        # Only a Backup whose deletion deletes its archive waits for it.
        if deletion_policy(life) is DeletionPolicy.DELETE and ARCHIVE_FINALIZER not in finalizers:
            finalizers.append(ARCHIVE_FINALIZER)
            backup = await self.local.replace(BACKUPS, backup)
            status = backup.setdefault("status", {})
        # A Backup found InProgress was interrupted (the controller restarted):
        # that attempt counts, and its upload was aborted or will expire.
        if status.get("phase") == IN_PROGRESS:
            status["retries"] = int(status.get("retries") or 0) + 1
        status["phase"] = IN_PROGRESS
        status.setdefault("startedAt", _now(self.clock))
        backup = await self.local.replace_status(BACKUPS, backup)
        try:
            target = await self._target(backup)
            summary = await self._run(backup, target)
        except (SourceRefusedError, LimitExceededError) as error:
            # Trying again reads the same kubeconfig, or the same control plane.
            return await self._refused(backup, error.reason, str(error))
        except (BackupError, StorageError, KubeError) as error:
            return await self._failed(backup, str(error))
        except Exception as error:  # noqa: BLE001 (an archive or a deep object; never loop forever)
            return await self._failed(backup, f"unexpected error ({type(error).__name__})")
        status = backup.setdefault("status", {})
        status.update(
            {
                "phase": COMPLETED,
                "location": {
                    "bucket": backup["spec"]["storage"]["bucket"],
                    "key": archive_key(backup),
                },
                "sha256": summary.sha256,
                "size": summary.size,
                "objects": summary.objects,
                "completedAt": _now(self.clock),
            }
        )
        _set_condition(
            status, "Completed", "BackupCompleted", f"{summary.objects} objects", _now(self.clock)
        )
        await self.local.replace_status(BACKUPS, backup)
        await self.events.record(
            backup, "Normal", "BackupCompleted", f"{summary.objects} objects archived"
        )
        return await self._finished(backup)

    def _check_role(self, backup: Mapping[str, Any]) -> None:
        """Refuse a ``WebIdentity`` role the operator does not allow, before a token goes in.

        Raises:
            TenancyError: naming the field and the rule.
        """
        namespace = backup["metadata"]["namespace"]
        spec = storage_spec(backup["spec"].get("storage") or {}, namespace)
        if spec.assume_role_with == AssumeRoleWith.WEB_IDENTITY:
            prefix = str((backup["spec"].get("storage") or {}).get("prefix") or "")
            self.web_identity_roles.check_role(spec.role_arn, namespace, prefix)

    async def _target(self, backup: Mapping[str, Any]) -> Target:
        """The Instance's kubeconfig, from the connection secret the provider wrote for it.

        Raises:
            BackupError: the control plane has no kubeconfig yet (retried).
            SourceRefusedError: the Secret or its kubeconfig breaks a rule.
        """
        namespace = backup["metadata"]["namespace"]
        ref = (backup["spec"].get("instanceRef") or {}).get("name", "")
        instance = await self.local.get(INSTANCES, namespace, ref)
        if instance is None:
            msg = f"Instance {namespace}/{ref} not found"
            raise BackupError(msg)
        secret_name = connection_secret_name(instance)
        secret = await self.local.get(kube.SECRETS, namespace, secret_name) if secret_name else None
        encoded = ((secret or {}).get("data") or {}).get(KUBECONFIG_KEY)
        if secret is None or not encoded:
            msg = (
                f"Instance {namespace}/{ref} has no kubeconfig yet (its control plane is not ready)"
            )
            raise BackupError(msg)
        check_connection_secret(instance, secret)
        try:
            kubeconfig = kube.load_kubeconfig_text(base64.b64decode(encoded).decode())
            server = kubeconfig_rules.parse(kubeconfig).server
        except (KubeError, ValueError) as error:
            detail = (
                str(error).removeprefix("kubeconfig: ")
                if isinstance(error, KubeconfigError)
                else "it is not a kubeconfig"
            )
            msg = f"the kubeconfig of Instance {namespace}/{ref}: {detail}"
            raise SourceRefusedError(msg, KUBECONFIG_NOT_ALLOWED) from None
        space, published = (None, None)
        if not self.controlplane_hosts.patterns:
            space, published = await self._space_hosts(instance)
        try:
            self.controlplane_hosts.check(server, space_server=space, published=published)
        except KubeconfigError as error:
            detail = str(error).removeprefix("kubeconfig: ")
            msg = f"the kubeconfig of Instance {namespace}/{ref}: {detail}"
            raise SourceRefusedError(msg, CONTROL_PLANE_HOST_NOT_ALLOWED) from None
        at_provider = (instance.get("status") or {}).get("atProvider") or {}
        version = at_provider.get("crossplaneVersion")
        return Target(kubeconfig, f"{namespace}/{ref}", version if isinstance(version, str) else "")

    async def _space_hosts(
        self, instance: Mapping[str, Any]
    ) -> tuple[str | None, HostPattern | None]:
        """The Space's API URL and published ingress host, as the provider knows them.

        Read from the Instance's provider config: the ingress host the provider
        recorded in its ``status.space`` (what the Space publishes), and the Space's
        URL (an ``UpboundTokens`` config's ``spaceURL``, else the server of its
        kubeconfig Secret, read as the provider reads it: a namespaced
        ProviderConfig may use only a Secret of its own namespace). Either is None
        when unknown; a failed read is a KubeError (retried).
        """
        namespace = instance["metadata"]["namespace"]
        try:
            ref = parse(InstanceSpec, instance.get("spec") or {}, "spec").provider_config_ref
        except InvalidError:
            return None, None
        if ref.kind == "ProviderConfig":
            config = await self.local.get(PROVIDER_CONFIGS, namespace, ref.name)
        else:
            config = await self.local.get(CLUSTER_PROVIDER_CONFIGS, None, ref.name)
        try:
            credentials = parse(
                ProviderConfigSpec, (config or {}).get("spec") or {}, "spec"
            ).spaces.credentials
            status = parse(ProviderConfigStatus, (config or {}).get("status") or {}, "status")
            published = (
                HostPattern.parse(status.space.ingress_host) if status.space.ingress_host else None
            )
        except (InvalidError, HostPatternError):
            return None, None
        if credentials.source == "UpboundTokens" and credentials.upbound is not None:
            return credentials.upbound.space_url, published
        selector = credentials.secret_ref
        try:
            secret_namespace = credentials_namespace(ref.kind, ref.name, selector, namespace)
        except InvalidError:
            return None, published
        secret = await self.local.get(kube.SECRETS, secret_namespace, selector.name)
        encoded = ((secret or {}).get("data") or {}).get(selector.key)
        if not encoded:
            return None, published
        try:
            text = base64.b64decode(encoded).decode()
            return kubeconfig_rules.parse(kube.load_kubeconfig_text(text)).server, published
        except (KubeError, ValueError):
            return None, published

    async def _run(self, backup: Mapping[str, Any], target: Target) -> Summary:
        """Export and upload in a thread of its own: boto3 blocks, the controller must not."""
        spec = storage_spec(backup["spec"]["storage"], backup["metadata"]["namespace"])
        key = archive_key(backup)
        excluded = tuple(backup["spec"].get("excludedResources") or ())
        exported_at = self.clock()
        return await asyncio.to_thread(
            lambda: asyncio.run(self._upload(spec, key, target, excluded, exported_at))
        )

    async def _upload(
        self,
        spec: StorageSpec,
        key: str,
        target: Target,
        excluded: tuple[str, ...],
        exported_at: datetime,
    ) -> Summary:
        store = self.store(spec)
        source = await Cluster.from_kubeconfig(target.kubeconfig)
        try:
            async with asyncio.timeout(self.deadline) as deadline:
                with store.writer(key) as sink:
                    # Returning inside the block: leaving it completes the upload.
                    return await write_archive(
                        source,
                        sink,
                        instance=target.instance,
                        exported_at=exported_at,
                        excluded=excluded,
                        limits=self.limits,
                        crossplane_version=target.crossplane_version,
                    )
        except TimeoutError:
            if not deadline.expired():
                raise
            msg = (
                f"the backup did not finish within {format_go_duration(self.deadline)} "
                "(the deadline per Backup, --backup-timeout)"
            )
            raise LimitExceededError(msg, DEADLINE_EXCEEDED) from None
        finally:
            await source.close()

    async def _refused(self, backup: dict[str, Any], reason: str, message: str) -> Result:
        """Fail at once, ``reason`` naming the rule or limit: retrying cannot change it."""
        status = backup.setdefault("status", {})
        now = _now(self.clock)
        status["phase"] = FAILED
        status["completedAt"] = now
        _set_condition(status, "Failed", reason, message, now)
        await self.local.replace_status(BACKUPS, backup)
        _count_failure(backup, reason)
        await self.events.record(backup, "Warning", reason, message)
        return await self._finished(backup)

    async def _failed(self, backup: dict[str, Any], message: str) -> Result:
        status = backup.setdefault("status", {})
        status["retries"] = int(status.get("retries") or 0) + 1
        now = _now(self.clock)
        log.warning(
            "backup attempt failed",
            extra={"fields": {"backup": backup["metadata"]["name"], "error": message}},
        )
        await self.events.record(backup, "Warning", BACKUP_FAILED, message)
        if status["retries"] >= MAX_ATTEMPTS:
            status["phase"] = FAILED
            status["completedAt"] = now
            _set_condition(status, "Failed", BACKUP_FAILED, message, now)
            await self.local.replace_status(BACKUPS, backup)
            _count_failure(backup, BACKUP_FAILED)
            return await self._finished(backup)
        status["phase"] = PENDING
        # The condition says why while it retries; it is not Failed for good yet.
        _set_condition(status, "Failed", "Retrying", message, now, value="False")
        await self.local.replace_status(BACKUPS, backup)
        return Result(requeue=True)

    async def _finished(self, backup: dict[str, Any]) -> Result:
        """Look again when the Backup expires; expired, delete it and its archive."""
        try:
            life = read_life(backup)
        except ValueError:
            return Result()  # refused as InvalidSpec before it ran: it has no expiry
        expiry = expires_at(life)
        if expiry is None:
            return Result()
        wait = (expiry - self.clock()).total_seconds()
        if wait > 0:
            return Result(requeue_after=max(wait, 1.0))
        # Whatever the policy: an expired Backup takes its archive along. Under
        # Delete the finalizer deletes it again, and finds nothing.
        if not await self._delete_archive(backup):
            return Result(requeue=True)
        await self.events.record(
            backup,
            "Normal",
            "BackupExpired",
            f"its ttl ({backup['spec']['ttl']}) passed at {format_timestamp(expiry)}: "
            "the Backup and its archive are deleted",
        )
        metadata = backup["metadata"]
        await self.local.delete(BACKUPS, metadata["namespace"], metadata["name"])
        return Result()

    async def _delete(self, backup: dict[str, Any]) -> Result:
        """Delete the archive (unless it is to be kept), then let the Backup go."""
        location = (backup.get("status") or {}).get("location") or {}
        if location.get("key") and await self._keeps_archive(backup):
            await self.events.record(
                backup,
                "Normal",
                "ArchiveKept",
                f"the archive s3://{location.get('bucket')}/{location['key']} is kept "
                "(deletionPolicy Orphan, or its schedule is deleted): the bucket's "
                "lifecycle rule, or you, expire it",
            )
        elif not await self._delete_archive(backup):
            return Result(requeue=True)
        finalizers = [
            f for f in backup["metadata"].get("finalizers") or [] if f != ARCHIVE_FINALIZER
        ]
        if finalizers != backup["metadata"].get("finalizers"):
            backup["metadata"]["finalizers"] = finalizers
            await self.local.replace(BACKUPS, backup)
        return Result()

    async def _delete_archive(self, backup: Mapping[str, Any]) -> bool:
        """Delete the archive the Backup wrote, if any; False when S3 refused (try again).

        Only the Backup's own key, under its namespace's prefix: a status.location
        naming anything else is left in place, saying so in an event.
        """
        location = (backup.get("status") or {}).get("location") or {}
        if not location.get("key"):
            return True
        spec = storage_spec(backup["spec"]["storage"], backup["metadata"]["namespace"])
        try:
            check_storage(backup, self.endpoints)
            self._check_role(backup)
            if location["key"] != archive_key(backup) or location.get("bucket") != spec.bucket:
                msg = "status.location is not this Backup's own archive"
                raise TenancyError(msg)
        except TenancyError as error:
            await self.events.record(
                backup,
                "Warning",
                "ArchiveNotDeleted",
                f"the recorded archive is left in place: {error}",
            )
            return True
        try:
            store = await asyncio.to_thread(self.store, spec)
            await asyncio.to_thread(store.delete, str(location["key"]))
        except StorageError as error:
            await self.events.record(backup, "Warning", "CannotDeleteArchive", str(error))
            return False
        return True

    async def _keeps_archive(self, backup: Mapping[str, Any]) -> bool:
        """Orphan (or Retain), or deleted in the cascade of its schedule's deletion."""
        try:
            if deletion_policy(read_life(backup)) is DeletionPolicy.ORPHAN:
                return True
        except ValueError:
            return True  # never delete an archive on a spec this controller cannot read
        metadata = backup["metadata"]
        owner = controller_of(backup)
        if owner is None or owner.get("kind") != BACKUP_SCHEDULES.kind:
            return False
        # The schedule marks its Backups Retain before it lets go; this covers a
        # foreground deletion, whose cascade may reach a Backup before the mark.
        schedule = await self.local.get(BACKUP_SCHEDULES, metadata["namespace"], owner["name"])
        return (
            schedule is None
            or schedule["metadata"].get("uid") != owner.get("uid")
            or bool(schedule["metadata"].get("deletionTimestamp"))
        )


def _count_failure(backup: Mapping[str, Any], reason: str) -> None:
    """Count a Backup that failed for good against its schedule, if a schedule made it."""
    metadata = backup["metadata"]
    schedule = (metadata.get("labels") or {}).get(SCHEDULE_LABEL)
    if schedule:
        metrics.count_backup_failure(str(metadata["namespace"]), str(schedule), reason)


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The object's controlling ownerReference, if any."""
    return next(
        (
            dict(ref)
            for ref in obj["metadata"].get("ownerReferences") or []
            if ref.get("controller")
        ),
        None,
    )
