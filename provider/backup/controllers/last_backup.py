"""What a BackupSchedule says of its newest finished Backup: its ``LastBackup`` condition (pure).

``LastBackup`` is False while the schedule's newest finished Backup (Completed
or Failed, newest by firing time) failed, naming that Backup, with the reason
and message of its ``Failed`` condition; True, naming it, once a later Backup
completed; Unknown before any has finished. A Backup still running changes
nothing: the failure before it stands until it completes.

The schedule's ``Ready`` follows it: a schedule whose newest Backup failed is
not working as asked, so it is ``Ready=False`` (``LastBackupFailed``, with the
same message), and so is not ready to what composed it. The composition
function reads ``LastBackup`` for the composite's ``BackupsReady``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LAST_BACKUP = "LastBackup"
NO_BACKUP_YET = "NoBackupYet"
BACKUP_COMPLETED = "BackupCompleted"
# The schedule's Ready reason while its newest Backup has failed.
LAST_BACKUP_FAILED = "LastBackupFailed"
# A Backup whose attempts all failed (S3 or STS refused it, its control plane could
# not be read); also the reason given for a Failed Backup whose own cannot be read.
BACKUP_FAILED = "BackupFailed"
# A condition message at most; a Backup's own message is cut to fit.
MESSAGE_LIMIT = 1024
# A condition reason, as the API's Condition type requires it.
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]{0,1022}[A-Za-z0-9_])?")


@dataclass(frozen=True)
class LastBackup:
    """The ``LastBackup`` condition, and the Backup it is about ("" before any)."""

    status: str
    reason: str
    message: str
    backup: str = ""

    @property
    def failed(self) -> bool:
        """Whether the newest finished Backup failed."""
        return self.status == "False"


def of(backup: Mapping[str, Any] | None) -> LastBackup:
    """The condition for ``backup``, the schedule's newest finished Backup (None: none yet)."""
    if backup is None:
        return LastBackup("Unknown", NO_BACKUP_YET, "no Backup of this schedule has finished yet")
    name = str((backup.get("metadata") or {}).get("name") or "")
    status = backup.get("status") or {}
    if status.get("phase") != "Failed":
        completed_at = status.get("completedAt")
        when = f" at {completed_at}" if completed_at else ""
        return LastBackup("True", BACKUP_COMPLETED, f"Backup {name} completed{when}", name)
    failed: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {}
    )
    reason = str(failed.get("reason") or "")
    if not _REASON.fullmatch(reason):
        reason = BACKUP_FAILED
    detail = str(failed.get("message") or reason)
    return LastBackup("False", reason, bounded(f"Backup {name} failed: {detail}"), name)


def bounded(text: str) -> str:
    """``text`` on one line, at most ``MESSAGE_LIMIT`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= MESSAGE_LIMIT:
        return flat
    return flat[: MESSAGE_LIMIT - 1].rstrip() + "…"
