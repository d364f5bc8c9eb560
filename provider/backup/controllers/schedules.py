"""The BackupSchedule controller: makes Backups when they are due, prunes expired ones.

The decisions are ``plan``'s and ``final``'s; this module reads
and writes the objects. Backups are named after the firing time they are for,
so a controller restarted around a due time never makes two.

The Backups a schedule makes carry its ttl and ``deletionPolicy: Delete``;
it prunes them itself. A schedule holds a finalizer. Being deleted, it first
marks the Backups it owns ``deletion-policy: Retain`` (the garbage collector
deletes them once the schedule is gone, and their archives must stay
restorable in the bucket), then takes its final Backup, not owned by it,
``deletionPolicy: Orphan`` and without a ttl (so it and its archive outlive
the control plane), and lets go once that Backup is
Completed or Failed, or the bounded wait is over: saying so in an event and the
``FinalBackup`` condition, and in an event on the composite that owns it.

A schedule says how its newest finished Backup went (``backup.last_backup``):
``LastBackup`` False with that Backup's name, reason and message while it failed,
and ``Ready`` False with it, until a later Backup completes; a new failure is
told in an event on the schedule and on its composite. Its metrics (the time of
the newest Completed Backup, whether the newest failed) are set at every look.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from provider import kube
from provider.backup.controllers import final, last_backup
from provider.backup.controllers.backups import (
    BACKUP_SCHEDULES,
    BACKUPS,
    SCHEDULE_LABEL,
    STORAGE_REFUSED,
    check_storage,
    controller_of,
)
from provider.backup.controllers.cron import Cron, CronError
from provider.backup.controllers.plan import BackupRecord, SchedulePlan, parse_ttl, plan
from provider.backup.controllers.retention import DELETION_POLICY_ANNOTATION, RETAIN, DeletionPolicy
from provider.backup.storage.tenancy import EndpointPolicy, TenancyError
from provider.events import EventRecorder
from provider.kube import Cluster
from provider.managed.reconciler import Result
from provider.runtime import metrics
from provider.runtime.timestamps import format_timestamp, parse_timestamp

SCHEDULED_FOR = "controlplane.spaces.upbound.io/scheduled-for"
FINALIZER = "controlplane.spaces.upbound.io/final-backup"
# The final Backup's labels: its schedule's name (to find it, and to wake the
# schedule when it changes) and uid (a schedule re-created under the same name
# takes a final Backup of its own).
FINAL_BACKUP_OF = "controlplane.spaces.upbound.io/final-backup-of"
FINAL_BACKUP_OF_UID = "controlplane.spaces.upbound.io/final-backup-of-uid"
# On every Backup a schedule makes, scheduled and final: the Instance backed up, by
# which a composite's spec.restore.fromControlPlane finds that control plane's
# newest Backup (the function's function.restore.INSTANCE_LABEL; a test holds the
# two equal). Left off when the name cannot be a label value (over 63 characters).
INSTANCE_LABEL = "controlplane.spaces.upbound.io/instance"
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
FINAL_CONDITION = "FinalBackup"
# The API server's answer to a create in a namespace being deleted.
TERMINATING = "because it is being terminated"
DEFAULT_FINAL_BACKUP_TIMEOUT = timedelta(minutes=30)
# Look again at least this often, so a clock jump or a missed event is caught.
MAX_WAIT = timedelta(minutes=5)
# While a final Backup runs; its own changes wake the schedule sooner.
FINAL_POLL = timedelta(seconds=30)

log = logging.getLogger(__name__)


def record(backup: Mapping[str, Any]) -> BackupRecord:
    """What the planner needs to know of a Backup."""
    metadata = backup.get("metadata") or {}
    status = backup.get("status") or {}
    ttl_text = (backup.get("spec") or {}).get("ttl")
    try:
        ttl = parse_ttl(str(ttl_text)) if ttl_text else None
    except ValueError:
        ttl = None
    return BackupRecord(
        name=str(metadata.get("name")),
        scheduled_for=parse_timestamp((metadata.get("annotations") or {}).get(SCHEDULED_FOR)),
        phase=str(status.get("phase") or ""),
        completed_at=parse_timestamp(status.get("completedAt")),
        ttl=ttl,
    )


def schedule_of_backup(backup: dict[str, Any]) -> list[tuple[str, str]]:
    """The key of the schedule that owns a Backup, or whose final Backup it is (a watch mapper)."""
    metadata = backup.get("metadata") or {}
    labels = metadata.get("labels") or {}
    name = labels.get(SCHEDULE_LABEL) or labels.get(FINAL_BACKUP_OF)
    return [(str(metadata.get("namespace", "")), name)] if name else []


def final_record(backup: Mapping[str, Any]) -> final.FinalBackup:
    """What the final-backup decision needs to know of a Backup."""
    status = backup.get("status") or {}
    failed: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {}
    )
    return final.FinalBackup(
        name=str(backup["metadata"]["name"]),
        phase=str(status.get("phase") or ""),
        message=str(failed.get("message") or ""),
    )


def backup_of(
    schedule: Mapping[str, Any],
    name: str,
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    policy: DeletionPolicy,
    expires: bool,
) -> dict[str, Any]:
    """A Backup of what the schedule backs up, less what it excludes, where it stores it.

    ``expires``: it carries the schedule's ttl; else it has none and never expires.
    """
    spec = schedule.get("spec") or {}
    backup_spec: dict[str, Any] = {
        "instanceRef": dict(spec.get("instanceRef") or {}),
        "storage": dict(spec.get("storage") or {}),
        "deletionPolicy": policy.value,
    }
    if expires:
        backup_spec["ttl"] = str(spec.get("ttl") or "168h")
    if spec.get("excludedResources"):
        backup_spec["excludedResources"] = [str(name) for name in spec["excludedResources"]]
    instance = str(backup_spec["instanceRef"].get("name") or "")
    if instance and _LABEL_VALUE.fullmatch(instance):
        labels = {**labels, INSTANCE_LABEL: instance}
    return {
        "apiVersion": BACKUPS.api_version,
        "kind": BACKUPS.kind,
        "metadata": {
            "name": name,
            "namespace": schedule["metadata"]["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": backup_spec,
    }


class ScheduleReconciler:
    """Keeps one BackupSchedule's Backups."""

    def __init__(
        self,
        local: Cluster,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        endpoints: EndpointPolicy | None = None,
        final_backup_timeout: timedelta = DEFAULT_FINAL_BACKUP_TIMEOUT,
    ) -> None:
        """``clock`` is the time the schedule runs by (tests drive it).

        ``endpoints`` are the S3 endpoints the operator allows; a schedule naming
        another makes no Backups. ``final_backup_timeout`` bounds how long a schedule
        being deleted waits for its final Backup, from its deletionTimestamp.
        """
        self.local = local
        self.clock = clock
        self.endpoints = endpoints or EndpointPolicy()
        self.final_backup_timeout = final_backup_timeout
        self.events = EventRecorder(local, "controlplane-backup-controller")

    async def reconcile(self, namespace: str, name: str) -> Result:
        """Create the due Backup, delete expired ones, report the schedule's status.

        A schedule being deleted takes its final Backup and lets go instead.
        """
        schedule = await self.local.get(BACKUP_SCHEDULES, namespace, name)
        if schedule is None:
            metrics.forget_backup_schedule(namespace, name)
            return Result()
        if schedule["metadata"].get("deletionTimestamp"):
            return await self._finalize(schedule)
        return await self._keep(await self._hold(schedule))

    async def _keep(self, schedule: dict[str, Any]) -> Result:
        """Create the due Backup, delete expired ones, report the schedule's status."""
        namespace, name = schedule["metadata"]["namespace"], schedule["metadata"]["name"]
        spec = schedule.get("spec") or {}
        status = schedule.setdefault("status", {})
        before = dict(status)
        now = self.clock().astimezone(UTC)
        try:
            cron = Cron.parse(str(spec.get("schedule", "")))
            ttl = parse_ttl(str(spec.get("ttl") or "168h"))
        except (CronError, ValueError) as error:
            self._condition(status, "False", "InvalidSchedule", f"spec: {error}", now)
            if status != before:
                await self.local.replace_status(BACKUP_SCHEDULES, schedule)
            return Result()
        try:
            check_storage(schedule, self.endpoints)
        except TenancyError as error:
            self._condition(status, "False", STORAGE_REFUSED, str(error), now)
            if status != before:
                await self.local.replace_status(BACKUP_SCHEDULES, schedule)
            return Result()
        owned, _ = await self.local.list(
            BACKUPS, namespace, label_selector=f"{SCHEDULE_LABEL}={name}"
        )
        decision = plan(
            schedule=name,
            cron=cron,
            ttl=ttl,
            suspend=bool(spec.get("suspend")),
            now=now,
            created_at=parse_timestamp(schedule["metadata"].get("creationTimestamp")) or now,
            last_schedule_time=parse_timestamp(status.get("lastScheduleTime")),
            backups=[record(b) for b in owned],
        )
        if decision.create is not None and decision.scheduled_for is not None:
            await self._create(schedule, decision.create, decision.scheduled_for)
            status["lastScheduleTime"] = format_timestamp(decision.scheduled_for)
            status["lastBackup"] = decision.create
        elif decision.last_backup:
            status["lastBackup"] = decision.last_backup
        if decision.last_successful_backup:
            status["lastSuccessfulBackup"] = decision.last_successful_backup
        else:
            status.pop("lastSuccessfulBackup", None)
        for expired in decision.delete:
            await self.local.delete(BACKUPS, namespace, expired)
        if decision.next_run is not None:
            status["nextScheduleTime"] = format_timestamp(decision.next_run)
        else:
            status.pop("nextScheduleTime", None)
        await self._report(schedule, before, owned, decision, now)
        if decision.next_run is None:
            return Result(requeue_after=MAX_WAIT.total_seconds())
        wait = min(decision.next_run - now, MAX_WAIT)
        return Result(requeue_after=max(wait.total_seconds(), 1.0))

    async def _report(
        self,
        schedule: dict[str, Any],
        before: Mapping[str, Any],
        owned: list[dict[str, Any]],
        decision: SchedulePlan,
        now: datetime,
    ) -> None:
        """Write Ready and LastBackup (when they changed), the metrics, and a new failure's events.

        ``before`` is the status as read; ``owned`` the Backups the schedule owns.
        """
        namespace, name = schedule["metadata"]["namespace"], schedule["metadata"]["name"]
        status = schedule["status"]
        by_name = {b["metadata"]["name"]: b for b in owned}
        last = last_backup.of(by_name.get(decision.last_finished_backup or ""))
        told = self._condition(
            status, last.status, last.reason, last.message, now, type_=last_backup.LAST_BACKUP
        )
        if last.failed:
            self._condition(status, "False", last_backup.LAST_BACKUP_FAILED, last.message, now)
        else:
            message = "suspended" if (schedule.get("spec") or {}).get("suspend") else ""
            self._condition(status, "True", "Suspended" if message else "Scheduled", message, now)
        if status != before:
            schedule = await self.local.replace_status(BACKUP_SCHEDULES, schedule)
        successful = by_name.get(decision.last_successful_backup or "") or {}
        completed_at = parse_timestamp((successful.get("status") or {}).get("completedAt"))
        metrics.record_backup_schedule(
            namespace,
            name,
            last_success=completed_at.timestamp() if completed_at else None,
            last_failed=last.failed,
        )
        if told and last.failed:
            await self._tell_failure(schedule, last)

    async def _tell_failure(
        self, schedule: Mapping[str, Any], last: last_backup.LastBackup
    ) -> None:
        """A Warning event, on the schedule and on its composite, that its newest Backup failed."""
        await self._tell(schedule, "Warning", last.reason, last.message)
        composite = await self._composite(schedule)
        if composite is not None:
            metadata = schedule["metadata"]
            where = f"BackupSchedule {metadata['namespace']}/{metadata['name']}"
            await self._tell(composite, "Warning", last.reason, f"{where}: {last.message}")

    async def _create(self, schedule: Mapping[str, Any], name: str, at: datetime) -> None:
        metadata = schedule["metadata"]
        backup = backup_of(
            schedule,
            name,
            labels={SCHEDULE_LABEL: metadata["name"]},
            annotations={SCHEDULED_FOR: format_timestamp(at)},
            policy=DeletionPolicy.DELETE,
            expires=True,
        )
        backup["metadata"]["ownerReferences"] = [
            {
                "apiVersion": schedule["apiVersion"],
                "kind": schedule["kind"],
                "name": metadata["name"],
                "uid": metadata["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        # Made before a restart, if it exists: the name is the firing time.
        await self._create_once(
            schedule, backup, "BackupCreated", f"Backup {name} for {format_timestamp(at)}"
        )

    async def _create_once(
        self, schedule: Mapping[str, Any], backup: dict[str, Any], reason: str, message: str
    ) -> None:
        """Create ``backup`` and say so on ``schedule``; one that exists was made already."""
        try:
            await self.local.create(BACKUPS, backup)
        except kube.AlreadyExistsError:
            return
        await self.events.record(schedule, "Normal", reason, message)

    async def _hold(self, schedule: dict[str, Any]) -> dict[str, Any]:
        """The schedule with the finalizer that makes its deletion wait for the final Backup."""
        finalizers = schedule["metadata"].setdefault("finalizers", [])
        if FINALIZER in finalizers:
            return schedule
        finalizers.append(FINALIZER)
        return await self.local.replace(BACKUP_SCHEDULES, schedule)

    async def _finalize(self, schedule: dict[str, Any]) -> Result:
        """Keep the owned Backups' archives, take the final Backup, then let go."""
        metadata = schedule["metadata"]
        if FINALIZER not in (metadata.get("finalizers") or []):
            return Result()
        await self._retain_owned(schedule)
        spec = schedule.get("spec") or {}
        found, _ = await self.local.list(
            BACKUPS,
            metadata["namespace"],
            label_selector=f"{FINAL_BACKUP_OF_UID}={metadata['uid']}",
        )
        now = self.clock().astimezone(UTC)
        step = final.decide(
            schedule=metadata["name"],
            enabled=spec.get("finalBackup", True) is not False,
            suspended=bool(spec.get("suspend")),
            deleted_at=parse_timestamp(metadata["deletionTimestamp"]) or now,
            now=now,
            timeout=self.final_backup_timeout,
            found=final_record(found[0]) if found else None,
        )
        if step.action is final.Action.CREATE:
            try:
                await self._create_final(schedule, step.name)
            except kube.KubeError as error:
                # A namespace being deleted takes no new objects: waiting cannot help.
                if TERMINATING not in str(error):
                    raise
                step = final.cannot_create(step.name, "its namespace is being deleted")
        if step.action is not final.Action.RELEASE:
            wait = min(step.wait or FINAL_POLL, FINAL_POLL)
            return Result(requeue_after=max(wait.total_seconds(), 1.0))
        assert step.outcome is not None  # a release always says why
        schedule = await self._report_final(schedule, step.outcome, step.name, step.message, now)
        schedule["metadata"]["finalizers"] = [
            f for f in schedule["metadata"].get("finalizers") or [] if f != FINALIZER
        ]
        await self.local.replace(BACKUP_SCHEDULES, schedule)
        metrics.forget_backup_schedule(metadata["namespace"], metadata["name"])
        return Result()

    async def _retain_owned(self, schedule: Mapping[str, Any]) -> None:
        """Mark the Backups this schedule owns Retain: the cascade then keeps their archives."""
        metadata = schedule["metadata"]
        owned, _ = await self.local.list(
            BACKUPS, metadata["namespace"], label_selector=f"{SCHEDULE_LABEL}={metadata['name']}"
        )
        for backup in owned:
            owner = controller_of(backup) or {}
            annotations = backup["metadata"].get("annotations") or {}
            if (
                owner.get("uid") != metadata["uid"]
                or annotations.get(DELETION_POLICY_ANNOTATION) == RETAIN
            ):
                continue
            try:
                await self.local.merge_patch(
                    BACKUPS,
                    metadata["namespace"],
                    backup["metadata"]["name"],
                    {"metadata": {"annotations": {DELETION_POLICY_ANNOTATION: RETAIN}}},
                )
            except kube.NotFoundError:
                continue  # already gone

    async def _create_final(self, schedule: Mapping[str, Any], name: str) -> None:
        metadata = schedule["metadata"]
        # Not owned by the schedule, so it outlives it; no ttl, so it stays until a
        # team deletes it; Orphan, so its archive outlives the Backup (whose role
        # usually goes with the composite) and no finalizer holds a namespace.
        backup = backup_of(
            schedule,
            name,
            labels={FINAL_BACKUP_OF: metadata["name"], FINAL_BACKUP_OF_UID: metadata["uid"]},
            annotations={},
            policy=DeletionPolicy.ORPHAN,
            expires=False,
        )
        # Made before a restart, if it exists: the name is the deletion time.
        await self._create_once(
            schedule, backup, "FinalBackupCreated", f"final Backup {name} before deletion"
        )

    async def _report_final(
        self,
        schedule: dict[str, Any],
        outcome: final.Outcome,
        name: str,
        message: str,
        now: datetime,
    ) -> dict[str, Any]:
        """The FinalBackup condition, an event on the schedule and one on its composite.

        Returns:
            The schedule as written.
        """
        status = schedule.setdefault("status", {})
        if name:
            status["finalBackup"] = name
        value = "True" if outcome.saved else "False"
        self._condition(status, value, outcome.value, message, now, type_=FINAL_CONDITION)
        written = await self.local.replace_status(BACKUP_SCHEDULES, schedule)
        type_ = "Normal" if outcome.saved else "Warning"
        await self._tell(schedule, type_, outcome.value, message)
        if outcome in (final.Outcome.DISABLED, final.Outcome.SUSPENDED):
            return written
        composite = await self._composite(schedule)
        if composite is not None:
            where = (
                f"BackupSchedule {schedule['metadata']['namespace']}/{schedule['metadata']['name']}"
            )
            await self._tell(composite, type_, outcome.value, f"{where}: {message}")
        return written

    async def _tell(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an event, or log that it cannot be.

        An event refused (its namespace is being deleted) never holds the schedule
        back: the condition and the log say the same.
        """
        try:
            await self.events.record(obj, type_, reason, message)
        except kube.KubeError as error:
            log.warning(
                "cannot record an event",
                extra={"fields": {"reason": reason, "message": message, "error": str(error)}},
            )

    async def _composite(self, schedule: Mapping[str, Any]) -> dict[str, Any] | None:
        """The schedule's controlling owner (the composite), as an event's involvedObject."""
        owner = controller_of(schedule)
        if owner is None:
            return None
        try:
            namespaced = await self.local.is_namespaced(
                str(owner["apiVersion"]), str(owner["kind"])
            )
        except kube.KubeError as error:
            log.warning(
                "cannot tell the composite's scope; no event on it",
                extra={"fields": {"owner": owner.get("name"), "error": str(error)}},
            )
            return None
        if namespaced is None:
            return None
        return {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "metadata": {
                "name": owner["name"],
                "namespace": schedule["metadata"]["namespace"] if namespaced else "",
                "uid": owner.get("uid"),
            },
        }

    @staticmethod
    def _condition(
        status: dict[str, Any],
        value: str,
        reason: str,
        message: str,
        now: datetime,
        *,
        type_: str = "Ready",
    ) -> bool:
        """Set the condition ``type_``; whether it changed (an unchanged one is left as it is)."""
        current = next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)
        fresh = {"type": type_, "status": value, "reason": reason}
        if message:
            fresh["message"] = message
        if (
            current is not None
            and all(current.get(k) == v for k, v in fresh.items())
            and (current.get("message", "") == message)
        ):
            return False
        fresh["lastTransitionTime"] = format_timestamp(now)
        status["conditions"] = [
            *(c for c in status.get("conditions") or [] if c.get("type") != type_),
            fresh,
        ]
        return True
