"""The BackupSchedule controller's decisions (pure): which Backup to make now, which to delete.

A schedule acts at most once per firing time, and only on the latest one due:
firings missed while the controller was down collapse into one Backup, as a
CronJob without a starting deadline catches up once. Backup names carry the
firing time, so a controller that restarts between creating a Backup and
recording it in status finds the Backup by name instead of making a second.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from provider.backup.controllers.cron import Cron

COMPLETED = "Completed"
FAILED = "Failed"
# Pending and InProgress Backups are still writing their archive: never delete those.
FINISHED_PHASES = frozenset({COMPLETED, FAILED})
# The longest DNS-1123 label, so a Backup's name can also be a label value.
MAX_NAME_LENGTH = 63
_STAMP_LENGTH = len("-20261202060000")
_DIGEST_LENGTH = 8
_NEVER = datetime.min.replace(tzinfo=UTC)

_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    # Go accepts both look-alike micro signs: U+00B5 and U+03BC.
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_UNIT = "|".join(sorted(_NANOSECONDS, key=len, reverse=True))
_COMPONENT = rf"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)({_UNIT})"
_DURATION = re.compile(rf"[-+]?(?:0|(?:{_COMPONENT})+)")


@dataclass(frozen=True)
class BackupRecord:
    """What the schedule needs to know of one Backup it owns."""

    name: str
    scheduled_for: datetime | None
    phase: str
    completed_at: datetime | None
    ttl: timedelta | None

    @property
    def expires_at(self) -> datetime | None:
        """When the Backup expires: ``completed_at + ttl``, or None unless both are known."""
        if self.completed_at is None or self.ttl is None:
            return None
        return self.completed_at + self.ttl


@dataclass(frozen=True)
class SchedulePlan:
    """What the controller does now, and what it writes into the schedule's status.

    ``last_backup``, ``last_successful_backup`` and ``last_finished_backup`` (the newest
    Completed or Failed) describe the Backups as they stand once the plan is carried
    out: the one created counts, the ones deleted do not.
    """

    create: str | None
    scheduled_for: datetime | None
    delete: tuple[str, ...]
    next_run: datetime | None
    last_backup: str | None
    last_successful_backup: str | None
    last_finished_backup: str | None = None


def backup_name(schedule: str, at: datetime) -> str:
    """The name of the schedule's Backup for the firing time ``at``.

    Args:
        schedule: the BackupSchedule's name (a DNS-1123 subdomain).
        at: a timezone-aware firing time.

    Returns:
        ``<schedule>-<UTC yyyymmddhhmmss>``; when that is longer than 63 characters, the
        schedule part is cut and ends in 8 hex characters of its sha256, so names stay
        distinct per schedule and per time.

    Raises:
        ValueError: ``at`` is naive.
    """
    return stamped_name(schedule, "", at)


def stamped_name(schedule: str, infix: str, at: datetime) -> str:
    """``<schedule><infix>-<UTC yyyymmddhhmmss>``, at most 63 characters.

    Only the schedule part is shortened (cut, then 8 hex characters of its sha256),
    so the infix and the time always stay readable.

    Raises:
        ValueError: ``at`` is naive.
    """
    if at.tzinfo is None or at.utcoffset() is None:
        msg = f"at must be timezone-aware (got {at.isoformat()})"
        raise ValueError(msg)
    stamp = f"{at.astimezone(UTC):%Y%m%d%H%M%S}"
    if len(schedule) + len(infix) + _STAMP_LENGTH > MAX_NAME_LENGTH:
        digest = hashlib.sha256(schedule.encode()).hexdigest()[:_DIGEST_LENGTH]
        kept = MAX_NAME_LENGTH - _STAMP_LENGTH - len(infix) - len(digest) - 1
        # A cut that ends in "-" or "." would leave an invalid label before the digest.
        schedule = f"{schedule[:kept].rstrip('-.')}-{digest}"
    return f"{schedule}{infix}-{stamp}"


def parse_ttl(text: str) -> timedelta:
    """Parse a TTL written as a Go duration, such as ``168h``, ``90m`` or ``1h30m``.

    Args:
        text: the duration; units ns, us (or µs), ms, s, m and h, fractions allowed.

    Returns:
        The duration, rounded to microseconds.

    Raises:
        ValueError: the text is not a Go duration, or is negative.
    """
    if not _DURATION.fullmatch(text):
        msg = f"ttl must be a Go duration such as 168h, 90m or 1h30m (got {text!r})"
        raise ValueError(msg)
    nanoseconds = sum(
        (Fraction(number) * _NANOSECONDS[unit] for number, unit in re.findall(_COMPONENT, text)),
        start=Fraction(0),
    )
    if text.startswith("-") and nanoseconds:
        msg = f"ttl must not be negative (got {text!r})"
        raise ValueError(msg)
    return timedelta(microseconds=round(nanoseconds / 1000))


def plan(
    *,
    schedule: str,
    cron: Cron,
    ttl: timedelta,
    suspend: bool,
    now: datetime,
    created_at: datetime,
    last_schedule_time: datetime | None,
    backups: Sequence[BackupRecord],
) -> SchedulePlan:
    """Decide what a BackupSchedule does at ``now``.

    Args:
        schedule: the BackupSchedule's name.
        cron: its parsed schedule.
        ttl: its TTL, which a Backup that carries none of its own expires by.
        suspend: whether the schedule is suspended: no Backup is made, expired ones still go.
        now: the current time (timezone-aware).
        created_at: the schedule's creationTimestamp; no firing before it is run.
        last_schedule_time: the firing time last acted on, from status.
        backups: the Backups the schedule owns.

    Returns:
        The Backup to create (for the latest firing due, unless one of that name exists),
        the expired finished Backups to delete, the next firing time and the status names.
    """
    create: str | None = None
    due = cron.latest_at_or_before(
        now, not_before=max(created_at, last_schedule_time or created_at)
    )
    if not suspend and due is not None:
        name = backup_name(schedule, due)
        if all(backup.name != name for backup in backups):
            create = name
    delete = tuple(sorted(backup.name for backup in backups if _expired(backup, ttl, now)))
    kept = [backup for backup in backups if backup.name not in delete]
    if create is not None:
        kept.append(BackupRecord(create, due, "", None, None))
    successful = [backup for backup in kept if backup.phase == COMPLETED]
    return SchedulePlan(
        create=create,
        scheduled_for=due if create is not None else None,
        delete=delete,
        next_run=None if suspend else cron.next_after(now),
        last_backup=_newest(kept),
        last_successful_backup=_newest(successful),
        last_finished_backup=_newest([b for b in kept if b.phase in FINISHED_PHASES]),
    )


def _expired(backup: BackupRecord, ttl: timedelta, now: datetime) -> bool:
    if backup.phase not in FINISHED_PHASES or backup.completed_at is None:
        return False
    return backup.completed_at + (ttl if backup.ttl is None else backup.ttl) <= now


def _newest(backups: Sequence[BackupRecord]) -> str | None:
    # Hand-made Backups have no firing time: they rank below scheduled ones, by name.
    newest = max(
        backups,
        key=lambda b: (b.scheduled_for is not None, b.scheduled_for or _NEVER, b.name),
        default=None,
    )
    return None if newest is None else newest.name
