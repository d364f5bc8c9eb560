"""The BackupSchedule controller: makes Backups when they are due, prunes expired ones.

The decisions are ``backup.plan``'s; this module reads and writes the
objects. Backups are named after the firing time they are for, so a
controller restarted around a due time never makes two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from provider import kube
from provider.backup.backups import BACKUP_SCHEDULES, BACKUPS, check_storage
from provider.backup.cron import Cron, CronError
from provider.backup.plan import BackupRecord, parse_ttl, plan
from provider.backup.tenancy import EndpointPolicy, TenancyError
from provider.events import EventRecorder
from provider.kube import Cluster
from provider.managed.reconciler import Result

SCHEDULE_LABEL = "controlplane.spaces.upbound.io/schedule"
SCHEDULED_FOR = "controlplane.spaces.upbound.io/scheduled-for"
_TIME = "%Y-%m-%dT%H:%M:%SZ"
# Look again at least this often, so a clock jump or a missed event is caught.
MAX_WAIT = timedelta(minutes=5)


def _parse_time(value: object) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _format(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_TIME)


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
        scheduled_for=_parse_time((metadata.get("annotations") or {}).get(SCHEDULED_FOR)),
        phase=str(status.get("phase") or ""),
        completed_at=_parse_time(status.get("completedAt")),
        ttl=ttl,
    )


def schedule_of_backup(backup: dict[str, Any]) -> list[tuple[str, str]]:
    """The key of the schedule that owns a Backup (a watch mapper)."""
    metadata = backup.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(SCHEDULE_LABEL)
    return [(str(metadata.get("namespace", "")), name)] if name else []


class ScheduleReconciler:
    """Keeps one BackupSchedule's Backups."""

    def __init__(
        self,
        local: Cluster,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        endpoints: EndpointPolicy | None = None,
    ) -> None:
        """``clock`` is the time the schedule runs by (tests drive it).

        ``endpoints`` are the S3 endpoints the operator allows; a schedule naming
        another makes no Backups.
        """
        self.local = local
        self.clock = clock
        self.endpoints = endpoints or EndpointPolicy()
        self.events = EventRecorder(local, "controlplane-backup-controller")

    async def reconcile(self, namespace: str, name: str) -> Result:
        """Create the due Backup, delete expired ones, report the schedule's status."""
        schedule = await self.local.get(BACKUP_SCHEDULES, namespace, name)
        if schedule is None or schedule["metadata"].get("deletionTimestamp"):
            return Result()
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
            self._condition(status, "False", "StorageRefused", str(error), now)
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
            created_at=_parse_time(schedule["metadata"].get("creationTimestamp")) or now,
            last_schedule_time=_parse_time(status.get("lastScheduleTime")),
            backups=[record(b) for b in owned],
        )
        if decision.create is not None and decision.scheduled_for is not None:
            await self._create(schedule, decision.create, decision.scheduled_for, spec)
            status["lastScheduleTime"] = _format(decision.scheduled_for)
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
            status["nextScheduleTime"] = _format(decision.next_run)
        else:
            status.pop("nextScheduleTime", None)
        message = "suspended" if spec.get("suspend") else ""
        self._condition(status, "True", "Suspended" if message else "Scheduled", message, now)
        if status != before:
            await self.local.replace_status(BACKUP_SCHEDULES, schedule)
        if decision.next_run is None:
            return Result(requeue_after=MAX_WAIT.total_seconds())
        wait = min(decision.next_run - now, MAX_WAIT)
        return Result(requeue_after=max(wait.total_seconds(), 1.0))

    async def _create(
        self, schedule: Mapping[str, Any], name: str, at: datetime, spec: Mapping[str, Any]
    ) -> None:
        metadata = schedule["metadata"]
        backup = {
            "apiVersion": BACKUPS.api_version,
            "kind": BACKUPS.kind,
            "metadata": {
                "name": name,
                "namespace": metadata["namespace"],
                "labels": {SCHEDULE_LABEL: metadata["name"]},
                "annotations": {SCHEDULED_FOR: _format(at)},
                "ownerReferences": [
                    {
                        "apiVersion": schedule["apiVersion"],
                        "kind": schedule["kind"],
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "instanceRef": dict(spec.get("instanceRef") or {}),
                "storage": dict(spec.get("storage") or {}),
                "ttl": str(spec.get("ttl") or "168h"),
            },
        }
        try:
            await self.local.create(BACKUPS, backup)
        except kube.AlreadyExistsError:
            return  # made before a restart: the name is the firing time
        await self.events.record(
            schedule, "Normal", "BackupCreated", f"Backup {name} for {_format(at)}"
        )

    @staticmethod
    def _condition(
        status: dict[str, Any], value: str, reason: str, message: str, now: datetime
    ) -> None:
        current = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None
        )
        fresh = {"type": "Ready", "status": value, "reason": reason}
        if message:
            fresh["message"] = message
        if (
            current is not None
            and all(current.get(k) == v for k, v in fresh.items())
            and (current.get("message", "") == message)
        ):
            return
        fresh["lastTransitionTime"] = _format(now)
        status["conditions"] = [
            *(c for c in status.get("conditions") or [] if c.get("type") != "Ready"),
            fresh,
        ]
