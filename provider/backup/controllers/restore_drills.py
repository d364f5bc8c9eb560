"""The restore-drill controller: runs the drills ``drills`` decides, one BackupSchedule at a time.

Each reconcile first deletes every throwaway Instance, of any schedule, that
is past its deadline (``drills.expired``): their state is on the Instances, so
the first reconcile after any start, however the last controller ended,
removes a throwaway control plane left behind. Then it takes the schedule's
drill one step: start it (create the throwaway Instance; the provider
restores the Backup into it), wait for the restore, hold the restored control
plane to the archive (``verify.checks``, its kubeconfig read under the rules
a Backup's is, ``BackupReconciler.instance_target``), and delete the
throwaway Instance whatever the outcome, writing ``status.lastVerifiedBackup``,
``status.lastDrillTime`` and the ``Verified`` condition, and the metrics.

What an archive promises is read once per drill, from the Backup's archive
through the schedule's own storage, and kept while the drill runs.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from provider import kube
from provider.backup.controllers import drills
from provider.backup.controllers.backups import (
    BACKUP_SCHEDULES,
    BACKUPS,
    SCHEDULE_LABEL,
    BackupError,
    StoreFactory,
    Target,
    check_storage,
    storage_spec,
)
from provider.backup.controllers.plan import COMPLETED
from provider.backup.format import archive
from provider.backup.source.connection_secret import SourceRefusedError
from provider.backup.source.export import restorable
from provider.backup.storage.s3 import StorageError, Store
from provider.backup.storage.tenancy import EndpointPolicy, TenancyError
from provider.backup.verify import checks
from provider.backup.verify.observe import observe
from provider.events import EventRecorder
from provider.kube import Cluster, KubeError
from provider.managed.reconciler import Result
from provider.model import INSTANCES
from provider.runtime import metrics
from provider.runtime.timestamps import format_timestamp, parse_timestamp

# A check that still fails this close to the deadline ends the drill, failed.
FINAL_CHECK_MARGIN = timedelta(seconds=30)

Targets = Callable[[str, str], Awaitable[Target]]

log = logging.getLogger(__name__)


def schedule_of_drill(instance: dict[str, Any]) -> list[tuple[str, str]]:
    """The key of the schedule a throwaway Instance drills for (a watch mapper)."""
    metadata = instance.get("metadata") or {}
    schedule = (metadata.get("labels") or {}).get(drills.DRILL_OF)
    return [(str(metadata.get("namespace") or ""), str(schedule))] if schedule else []


class DrillReconciler:
    """Runs BackupSchedules' restore drills."""

    def __init__(
        self,
        local: Cluster,
        targets: Targets,
        *,
        store: StoreFactory = Store.connect,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_drills: int = drills.DEFAULT_MAX_DRILLS,
        limits: archive.Limits | None = None,
        endpoints: EndpointPolicy | None = None,
    ) -> None:
        """``targets`` reads an Instance's kubeconfig under the Backups' rules.

        ``max_drills`` bounds the drills running at once across the cluster;
        ``endpoints`` are the S3 endpoints the operator allows, as for Backups.
        """
        self.endpoints = endpoints or EndpointPolicy()
        self.local = local
        self.targets = targets
        self.store = store
        self.clock = clock
        self.max_drills = max_drills
        self.limits = limits or archive.Limits()
        self.events = EventRecorder(local, "controlplane-backup-controller")
        # What each running drill's archive promises: (namespace, drill) -> Expected.
        self._expected: dict[tuple[str, str], checks.Expected] = {}

    async def reconcile(self, namespace: str, name: str) -> Result:
        """Delete expired throwaway Instances, then take the schedule's drill one step."""
        now = self.clock().astimezone(UTC)
        found = await self._drills()
        schedule = await self.local.get(BACKUP_SCHEDULES, namespace, name)
        gone = schedule is None or bool(schedule["metadata"].get("deletionTimestamp"))
        for drill in drills.expired(found, now):
            # This schedule's own drill ends below, with its verdict, unless it is gone.
            if gone or (drill.namespace, drill.schedule) != (namespace, name):
                await self._delete(drill)
        if schedule is None or gone:
            metrics.forget_drills(namespace, name)
            return Result()
        spec = schedule.get("spec") or {}
        try:
            verify = drills.parse_verify(spec)
        except drills.VerifyError as error:
            await self._write(schedule, drills.Verdict("False", drills.INVALID, str(error)), now)
            return Result()
        live = [d for d in found if not d.deleting and not d.expired(now)]
        mine = next((d for d in found if (d.namespace, d.schedule) == (namespace, name)), None)
        if verify is None:
            if mine is not None and not mine.deleting:
                await self._delete(mine)
            metrics.forget_drills(namespace, name)
            return Result()
        metrics.record_drill_interval(namespace, name, verify.interval.total_seconds())
        source = await self._source(schedule)
        step = drills.step(
            schedule=name,
            verify=verify,
            now=now,
            last_drill_at=parse_timestamp((schedule.get("status") or {}).get("lastDrillTime")),
            newest=await self._newest(namespace, name),
            mine=mine,
            busy_namespace=any(d.namespace == namespace and d is not mine for d in live),
            running=len(live),
            max_drills=self.max_drills,
            source_restoring=_restoring(source),
        )
        if step.start is not None:
            step = await self._start(schedule, source, step)
        elif step.check is not None:
            step = await self._check(step.check, now)
        # The verdict first: a controller that stops between the two finds the drill
        # still there and ends it again, while a deleted drill's verdict would be lost.
        if step.verdict is not None:
            await self._write(schedule, step.verdict, now, ended=step.delete is not None)
        if step.delete is not None:
            await self._delete(step.delete)
            self._expected.pop((namespace, step.delete.name), None)
        wait = step.wait or timedelta(seconds=5)
        return Result(requeue_after=max(wait.total_seconds(), 1.0))

    async def _drills(self) -> list[drills.Drill]:
        """Every throwaway Instance in the cluster."""
        found, _ = await self.local.list(INSTANCES, None, label_selector=drills.DRILL_OF)
        return [drills.drill_record(instance) for instance in found]

    async def _source(self, schedule: Mapping[str, Any]) -> dict[str, Any] | None:
        ref = ((schedule.get("spec") or {}).get("instanceRef") or {}).get("name", "")
        return await self.local.get(INSTANCES, schedule["metadata"]["namespace"], str(ref))

    async def _newest(self, namespace: str, name: str) -> drills.Newest | None:
        """The schedule's newest Completed Backup."""
        owned, _ = await self.local.list(
            BACKUPS, namespace, label_selector=f"{SCHEDULE_LABEL}={name}"
        )
        completed = [
            drills.Newest(str(b["metadata"]["name"]), at)
            for b in owned
            if (b.get("status") or {}).get("phase") == COMPLETED
            and (at := parse_timestamp(b["status"].get("completedAt"))) is not None
        ]
        return max(completed, key=lambda n: (n.completed_at, n.name), default=None)

    async def _start(
        self, schedule: Mapping[str, Any], source: Mapping[str, Any] | None, step: drills.Step
    ) -> drills.Step:
        assert step.start is not None  # only called to start one
        if source is None:
            ref = ((schedule.get("spec") or {}).get("instanceRef") or {}).get("name", "")
            message = f"Instance {ref} is not there: a drill restores into its Space"
            return drills.Step(
                verdict=drills.Verdict("False", drills.FAILED, message),
                wait=timedelta(minutes=5),
            )
        instance = drills.throwaway_instance(source, schedule, step.start)
        try:
            await self.local.create(INSTANCES, instance)
        except kube.AlreadyExistsError:
            return step
        await self._tell(
            schedule,
            "Normal",
            "DrillStarted",
            f"restoring Backup {step.start.backup} into the throwaway control plane "
            f"{step.start.name}, to be gone by {format_timestamp(step.start.deadline)}",
        )
        return step

    async def _check(self, drill: drills.Drill, now: datetime) -> drills.Step:
        """Hold the restored throwaway control plane to its archive."""
        final = drill.deadline is None or now + FINAL_CHECK_MARGIN >= drill.deadline
        try:
            expected = await self._promised(drill)
            target = await self.targets(drill.namespace, drill.name)
            cluster = await Cluster.from_kubeconfig(target.kubeconfig)
            try:
                report = checks.check(expected, await observe(cluster, expected))
            finally:
                await cluster.close()
        except (BackupError, KubeError) as error:
            # Not there yet (its kubeconfig, its API server): looked at again until the deadline.
            return drills.checked(drill, [str(error)], str(error), final=final)
        except (SourceRefusedError, StorageError, archive.ArchiveError) as error:
            return drills.checked(drill, [str(error)], str(error), final=True)
        return drills.checked(
            drill, [p.message for p in report.problems], report.summary(), final=final
        )

    async def _promised(self, drill: drills.Drill) -> checks.Expected:
        """What the drill's Backup's archive promises (read once per drill)."""
        key = (drill.namespace, drill.name)
        if key in self._expected:
            return self._expected[key]
        backup = await self.local.get(BACKUPS, drill.namespace, drill.backup)
        status = (backup or {}).get("status") or {}
        if backup is None or status.get("phase") != COMPLETED:
            msg = f"Backup {drill.backup} is gone or not Completed"
            raise archive.ArchiveError(msg)
        try:
            # The Backup's storage, held to the operator's rules as when it was written.
            check_storage(backup, self.endpoints)
        except TenancyError as error:
            raise archive.ArchiveError(str(error)) from None
        spec = storage_spec(backup["spec"].get("storage") or {}, drill.namespace)
        location = str((status.get("location") or {}).get("key") or "")
        size = int(status.get("size") or 0)

        def read() -> checks.Expected:
            with tempfile.TemporaryFile() as file:
                self.store(spec).download(location, file, limit=size)
                file.seek(0)
                with archive.verify(file, limits=self.limits, admit=restorable) as manifest:
                    file.seek(0)
                    return checks.expect(
                        manifest.types, archive.objects(file, manifest, limits=self.limits)
                    )

        expected = await asyncio.to_thread(read)
        self._expected[key] = expected
        return expected

    async def _delete(self, drill: drills.Drill) -> None:
        try:
            await self.local.delete(INSTANCES, drill.namespace, drill.name)
        except kube.NotFoundError:
            return
        log.info(
            "throwaway control plane deleted",
            extra={"fields": {"namespace": drill.namespace, "instance": drill.name}},
        )

    async def _write(
        self,
        schedule: dict[str, Any],
        verdict: drills.Verdict,
        now: datetime,
        *,
        ended: bool = False,
    ) -> None:
        """The Verified condition, and what an ended drill records, on the schedule."""
        metadata = schedule["metadata"]
        status = schedule.setdefault("status", {})
        before = {k: v for k, v in status.items() if k != "conditions"}
        conditions_before = list(status.get("conditions") or [])
        if ended:
            status["lastDrillTime"] = format_timestamp(now)
        if verdict.verified_backup:
            status["lastVerifiedBackup"] = verdict.verified_backup
            status["lastVerifiedTime"] = format_timestamp(now)
        _set_condition(status, verdict, now)
        if (
            status.get("conditions") != conditions_before
            or {k: v for k, v in status.items() if k != "conditions"} != before
        ):
            await self.local.replace_status(BACKUP_SCHEDULES, schedule)
        verified = parse_timestamp(status.get("lastVerifiedTime"))
        metrics.record_drill(
            metadata["namespace"],
            metadata["name"],
            last_verified=verified.timestamp() if verified is not None else None,
            failed=verdict.status == "False",
        )
        if ended:
            type_ = "Normal" if verdict.status == "True" else "Warning"
            await self._tell(schedule, type_, verdict.reason, verdict.message)

    async def _tell(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            await self.events.record(obj, type_, reason, message)
        except KubeError as error:
            log.warning(
                "cannot record an event",
                extra={"fields": {"reason": reason, "error": str(error)}},
            )


def _restoring(source: Mapping[str, Any] | None) -> bool:
    """Whether the source control plane is being restored (a real restore, not a drill)."""
    restore = (((source or {}).get("status") or {}).get("atProvider") or {}).get("restore") or {}
    return restore.get("phase") == "InProgress"


def _set_condition(status: dict[str, Any], verdict: drills.Verdict, now: datetime) -> None:
    current = next(
        (c for c in status.get("conditions") or [] if c.get("type") == drills.VERIFIED), None
    )
    fresh = {"type": drills.VERIFIED, "status": verdict.status, "reason": verdict.reason}
    if verdict.message:
        fresh["message"] = verdict.message
    if current is not None and all(current.get(k) == v for k, v in fresh.items()):
        return
    same_status = current is not None and current.get("status") == verdict.status
    fresh["lastTransitionTime"] = (
        str(current["lastTransitionTime"])
        if same_status and current is not None and current.get("lastTransitionTime")
        else format_timestamp(now)
    )
    status["conditions"] = [
        *(c for c in status.get("conditions") or [] if c.get("type") != drills.VERIFIED),
        fresh,
    ]
