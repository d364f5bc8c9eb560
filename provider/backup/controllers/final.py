"""What a BackupSchedule being deleted does about its final Backup (pure).

Like a database's final snapshot: before the schedule lets go (and with it,
through the Usages, the Instance and the role), it takes one last Backup that
it does not own, so the Backup outlives it, and waits until that Backup has
Completed or Failed. The wait is bounded and measured from the schedule's
deletionTimestamp, so a restarted controller waits no longer than one that
kept running. The final Backup's name is made from the deletionTimestamp too:
a controller restarted after creating it finds it instead of making another.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from provider.backup.controllers.plan import COMPLETED, FAILED, stamped_name

FINAL_INFIX = "-final"


class Action(StrEnum):
    """What to do now."""

    CREATE = "Create"
    WAIT = "Wait"
    RELEASE = "Release"


class Outcome(StrEnum):
    """Why a schedule let go; the reason of its FinalBackup condition and events."""

    DISABLED = "FinalBackupDisabled"
    SUSPENDED = "FinalBackupSkipped"
    COMPLETED = "FinalBackupCompleted"
    FAILED = "FinalBackupFailed"
    TIMED_OUT = "FinalBackupTimedOut"

    @property
    def saved(self) -> bool:
        """Whether the control plane's data was saved (or not asked to be)."""
        return self not in (Outcome.FAILED, Outcome.TIMED_OUT)


@dataclass(frozen=True)
class FinalBackup:
    """The final Backup as found: its name, phase and (when Failed) why."""

    name: str
    phase: str
    message: str = ""


@dataclass(frozen=True)
class Step:
    """The decision: create ``name``, wait up to ``wait``, or release with ``outcome``."""

    action: Action
    name: str = ""
    wait: timedelta | None = None
    outcome: Outcome | None = None
    message: str = ""


def final_backup_name(schedule: str, deleted_at: datetime) -> str:
    """``<schedule>-final-<UTC yyyymmddhhmmss>`` of the deletion time, at most 63 characters.

    Raises:
        ValueError: ``deleted_at`` is naive.
    """
    return stamped_name(schedule, FINAL_INFIX, deleted_at)


def decide(
    *,
    schedule: str,
    enabled: bool,
    suspended: bool,
    deleted_at: datetime,
    now: datetime,
    timeout: timedelta,
    found: FinalBackup | None,
) -> Step:
    """Decide what a schedule being deleted does about its final Backup at ``now``.

    Args:
        schedule: the BackupSchedule's name.
        enabled: its ``spec.finalBackup``.
        suspended: its ``spec.suspend``.
        deleted_at: its deletionTimestamp (timezone-aware).
        now: the current time (timezone-aware).
        timeout: how long to wait for the final Backup, from ``deleted_at``.
        found: the final Backup already made for this schedule, if any.

    Returns:
        Create the final Backup; wait for it (at most the time left); or release the
        schedule, with the outcome and a message a person can act on.
    """
    if found is None and not enabled:
        return Step(Action.RELEASE, outcome=Outcome.DISABLED, message=_DISABLED)
    if found is None and suspended:
        return Step(Action.RELEASE, outcome=Outcome.SUSPENDED, message=_SUSPENDED)
    if found is not None and found.phase == COMPLETED:
        return Step(
            Action.RELEASE,
            name=found.name,
            outcome=Outcome.COMPLETED,
            message=f"final Backup {found.name} completed",
        )
    if found is not None and found.phase == FAILED:
        why = f": {found.message}" if found.message else ""
        return Step(
            Action.RELEASE,
            name=found.name,
            outcome=Outcome.FAILED,
            message=f"the data was not saved: final Backup {found.name} failed{why}",
        )
    left = deleted_at + timeout - now
    if left <= timedelta(0):
        name = found.name if found is not None else final_backup_name(schedule, deleted_at)
        return Step(
            Action.RELEASE,
            name=name,
            outcome=Outcome.TIMED_OUT,
            message=(
                f"the data was not saved: final Backup {name} did not finish within "
                f"{_minutes(timeout)} of the deletion; the schedule lets go"
            ),
        )
    if found is None:
        return Step(Action.CREATE, name=final_backup_name(schedule, deleted_at), wait=left)
    return Step(Action.WAIT, name=found.name, wait=left)


def cannot_create(name: str, why: str) -> Step:
    """Release at once: the final Backup ``name`` cannot be made, and waiting cannot help."""
    return Step(
        Action.RELEASE,
        name=name,
        outcome=Outcome.FAILED,
        message=f"the data was not saved: final Backup {name} cannot be made: {why}",
    )


_DISABLED = "spec.finalBackup is false: no final backup was taken"
_SUSPENDED = "the schedule is suspended: no final backup was taken"


def _minutes(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds % 60:
        return f"{seconds}s"
    return f"{seconds // 60}m"
