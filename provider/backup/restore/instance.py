"""The restore an Instance asks for, and what its status says about it.

An Instance created with ``spec.forProvider.initialRestorationFrom`` is
restored once its control plane is available. The restore runs in the
provider's restore pool (``restore.pool``), apart from the reconcile: the
reconcile starts it, and at each reconcile copies where it stands into
``status.atProvider.restore`` (phase, step, objects applied of total, start
time) and a ``Restored`` condition. The pool wakes the Instance at a bounded
rate (``restore.steps.Throttle``) while the restore moves, so a person or a
tool watching it sees it move, and once more at its end. The record is also
where a restore interrupted by a restart resumes from.

The target's Crossplane version is the Instance's
``status.atProvider.crossplaneVersion`` (the Space's word). A restore the
version check refuses (the control plane on an older Crossplane minor than
the archive's) ends Failed before anything is applied, its ``Restored``
condition naming both versions, with a Warning event; it is tried again once
the control plane runs another version (the Space upgraded it) or the
provider restarts, not at every poll: that would download the archive again
only to refuse it. A newer minor, or
versions that could not be compared, is noted in a Normal event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provider import kube
from provider.backup.restore.compat import Compatibility
from provider.backup.restore.pool import DeadlineExceededError, Key, RestorePool, Wake
from provider.backup.restore.restorer import RestoreError, Restorer
from provider.backup.restore.steps import (
    COMPLETED,
    IN_PROGRESS,
    RESTORED,
    Progress,
    Throttle,
    Verdict,
    pending,
    verdict,
)
from provider.events import EventRecorder
from provider.kube import KubeError
from provider.managed import conditions
from provider.managed.external import ManagedObject
from provider.model import InvalidError, RestoreStatus, parse

# At most one wake per restore this often, besides one per step.
PROGRESS_INTERVAL_SECONDS = 2.0
# Restores running at once, and how long one may run: the provider's defaults.
DEFAULT_RESTORES = 2
DEFAULT_RESTORE_DEADLINE_SECONDS = 2 * 3600.0
# Events about the version check of a restore.
REASON_VERSION_REFUSED = "RestoreCrossplaneTooOld"
REASON_VERSION_NOTED = "RestoreCrossplaneVersion"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreBounds:
    """The operator's bounds on restores (``--max-restores``, ``--restore-timeout``)."""

    # Restores running at once, across every namespace.
    limit: int = DEFAULT_RESTORES
    # Seconds one restore may run, from the moment it gets a slot.
    deadline: float = DEFAULT_RESTORE_DEADLINE_SECONDS


def set_restored(managed: ManagedObject, found: Verdict) -> None:
    """Set the ``Restored`` condition in ``managed``'s status."""
    status = managed.setdefault("status", {})
    status["conditions"] = conditions.merged(
        status.get("conditions") or [],
        [conditions.Condition(RESTORED, found.status, found.reason, found.message)],
        int(managed["metadata"].get("generation") or 0),
    )


class InstanceRestore:
    """Starts an Instance's restore in the pool and reports it on the Instance."""

    def __init__(
        self,
        restorer: Restorer,
        *,
        limit: int = DEFAULT_RESTORES,
        deadline: float = DEFAULT_RESTORE_DEADLINE_SECONDS,
        wake: Wake | None = None,
        interval: float = PROGRESS_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """At most ``limit`` restores at once, each within ``deadline`` seconds.

        ``wake`` is told which Instance has news, at most every ``interval`` s
        while its restore moves, and at its end.
        """
        self.restorer = restorer
        self.pool = RestorePool(limit=limit, deadline=deadline, wake=wake)
        self.interval = interval
        self.clock = clock
        self.events = EventRecorder(restorer.local)
        # Where each restore in the pool stands, for the reconcile to record.
        self._progress: dict[Key, Progress] = {}
        # (Backup, Crossplane version of the control plane) the version check refused.
        self._refused: dict[Key, tuple[str, str]] = {}

    async def run(
        self, managed: ManagedObject, backup_name: str, kubeconfig: bytes | None
    ) -> conditions.Condition | None:
        """Start or follow the restore of ``backup_name``; a Ready condition while it is not done.

        ``managed``'s status gets the restore's record and its ``Restored`` condition,
        for the reconciler to write with the rest.
        """
        metadata = managed["metadata"]
        key = (str(metadata["namespace"]), str(metadata["name"]))
        at_provider = managed.setdefault("status", {}).setdefault("atProvider", {})
        recorded = _recorded(at_provider.get("restore"))
        job = self.pool.job(key)
        if job is None:
            if recorded.get("backupName") == backup_name and recorded.get("phase") == COMPLETED:
                return None
            running = str(at_provider.get("crossplaneVersion") or "")
            if self._refused.get(key) == (backup_name, running) and recorded.get("message"):
                # Refused for this version already: its record and condition stand.
                return conditions.unavailable(
                    f"restore from Backup {backup_name} failed: {recorded['message']}"
                )
            if not kubeconfig:
                set_restored(managed, pending(backup_name, "its control plane has a kubeconfig"))
                return conditions.unavailable(
                    f"waiting for a kubeconfig to restore Backup {backup_name}"
                )
            started = str(recorded.get("startedAt") or "")
            first = Progress(backup_name, IN_PROGRESS, "", 0, 0, started)
            try:
                target = kube.load_kubeconfig_text(kubeconfig.decode())
            except KubeError as error:
                # Refused before the restorer could say so.
                return _ended(managed, first.failed(str(error)), str(error))
            about = _event_subject(managed)
            job = self.pool.start(
                key,
                backup_name,
                lambda: self._restore(key, backup_name, target, recorded, about, running),
                lambda error: self._failure(key, first, error),
            )
        if not job.started:
            set_restored(
                managed,
                pending(
                    backup_name,
                    f"a restore slot is free (at most {self.pool.limit} at once, "
                    "one per namespace)",
                ),
            )
            return conditions.unavailable(
                f"waiting for a restore slot to restore Backup {backup_name}"
            )
        progress = self._progress.get(key)
        if not job.finished:
            if progress is None:
                return conditions.unavailable(f"restoring Backup {backup_name}")
            return _reported(managed, progress)
        self.pool.forget(key)
        self._progress.pop(key, None)
        if job.error is not None:
            base = progress or Progress(backup_name, IN_PROGRESS, "", 0, 0, "")
            return _ended(managed, base.failed(job.error), job.error)
        if progress is not None:
            _reported(managed, progress)
        return None

    async def cancel(self, managed: ManagedObject) -> None:
        """Stop the restore of an Instance being deleted; nothing is recorded of it."""
        metadata = managed["metadata"]
        key = (str(metadata.get("namespace") or ""), str(metadata["name"]))
        await self.pool.cancel(key)
        self._progress.pop(key, None)
        self._refused.pop(key, None)

    async def close(self) -> None:
        """Stop every restore; each resumes from its record when the provider starts again."""
        await self.pool.close()
        self._progress.clear()
        self._refused.clear()

    async def _restore(  # noqa: PLR0917 (one restore's parts, passed once)
        self,
        key: Key,
        backup_name: str,
        target: dict[str, Any],
        recorded: dict[str, Any],
        about: dict[str, Any],
        running: str,
    ) -> None:
        throttle = Throttle(self.interval)

        async def checked(found: Compatibility) -> None:
            if not found.allowed:
                self._refused[key] = (backup_name, running)
            else:
                self._refused.pop(key, None)
            if found.verdict == "SameMinor":
                return
            kind, reason = (
                ("Normal", REASON_VERSION_NOTED)
                if found.allowed
                else ("Warning", REASON_VERSION_REFUSED)
            )
            try:
                message = f"Backup {backup_name}: {found.message}"
                await self.events.record(about, kind, reason, message)
            except KubeError:
                log.debug("cannot record event", extra={"fields": {"resource": "/".join(key)}})

        async def report(progress: Progress) -> None:
            nonlocal throttle
            self._progress[key] = progress
            now = self.clock()
            if progress.phase == IN_PROGRESS and throttle.due(progress, now):
                throttle = throttle.wrote(progress, now)
                self.pool.wake(key)

        await self.restorer.restore(
            key[0],
            backup_name,
            target,
            progress=report,
            recorded=recorded,
            target_crossplane=running,
            on_check=checked,
        )

    def _failure(self, key: Key, first: Progress, error: BaseException) -> str:
        """What the Instance says of a restore that ended with ``error``."""
        if isinstance(error, RestoreError | KubeError):
            return str(error)
        reached = self._progress.get(key) or first
        if isinstance(error, DeadlineExceededError):
            step = reached.step or "before applying anything"
            return (
                f"the restore ran past its deadline of {self.pool.deadline:.0f}s "
                f"(at step {step}) and was stopped"
            )
        log.error(
            "restore stopped on an unexpected error",
            exc_info=error,
            extra={"fields": {"resource": f"{key[0]}/{key[1]}"}},
        )
        return "the restore stopped on an unexpected error; the provider's log says more"


def _event_subject(managed: ManagedObject) -> dict[str, Any]:
    """What an event about ``managed`` names: its kind, name, namespace and uid."""
    metadata = managed["metadata"]
    return {
        "apiVersion": managed.get("apiVersion", ""),
        "kind": managed.get("kind", ""),
        "metadata": {key: metadata.get(key) for key in ("name", "namespace", "uid")},
    }


def _reported(managed: ManagedObject, progress: Progress) -> conditions.Condition | None:
    """Record ``progress`` on ``managed``; a Ready condition unless it is Completed."""
    managed["status"]["atProvider"]["restore"] = progress.record()
    found = verdict(progress)
    set_restored(managed, found)
    return None if progress.phase == COMPLETED else conditions.unavailable(found.message)


def _ended(managed: ManagedObject, failed: Progress, why: str) -> conditions.Condition:
    """Record a failed restore on ``managed``; the Ready condition that says so."""
    _reported(managed, failed)
    return conditions.unavailable(f"restore from Backup {failed.backup_name} failed: {why}")


def _recorded(found: object) -> dict[str, Any]:
    """The record a previous run wrote; none when it is not one (never trusted blindly)."""
    try:
        return parse(RestoreStatus, found or {}, "status.atProvider.restore").model_dump(
            by_alias=True
        )
    except InvalidError:
        return {}
