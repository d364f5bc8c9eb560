"""How long a Backup and its archive live (pure): its deletion policy and when it expires.

A Backup's ``spec.deletionPolicy`` says what deleting the object does to its
archive: ``Delete`` deletes it, ``Orphan`` keeps it in S3. Left out, it is
``Delete`` for a Backup a BackupSchedule controls (as before there was a
field) and ``Orphan`` for any other, as Upbound Spaces' Backups default. A
Backup annotated ``deletion-policy: Retain`` (the mark a schedule being
deleted puts on the Backups it owns, and the final Backups of earlier
versions carry) always keeps its archive.

A Backup with ``spec.ttl`` expires ``ttl`` after it finished (its
``status.completedAt``, set when it is Completed or Failed for good): then
the Backup controller deletes its archive and the object, whatever the
policy. Counting from completion, not creation, gives every archive its full
ttl however long it waited or took, and matches how a schedule prunes. A
Backup a schedule controls is pruned by the schedule (by its own ttl, or the
schedule's), so the Backup controller leaves it alone; a Backup marked Retain
never expires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from provider.backup.controllers.plan import FINISHED_PHASES, parse_ttl
from provider.runtime.timestamps import parse_timestamp

SCHEDULE_KIND = "BackupSchedule"
# The annotation that keeps a Backup's archive whatever its policy, and its value.
DELETION_POLICY_ANNOTATION = "controlplane.spaces.upbound.io/deletion-policy"
RETAIN = "Retain"


class DeletionPolicy(StrEnum):
    """What deleting a Backup does to its archive."""

    ORPHAN = "Orphan"
    DELETE = "Delete"


@dataclass(frozen=True)
class BackupLife:
    """What decides a Backup's retention, read from the object."""

    declared_policy: DeletionPolicy | None
    ttl: timedelta | None
    phase: str
    completed_at: datetime | None
    scheduled: bool
    retained: bool


def deletion_policy(life: BackupLife) -> DeletionPolicy:
    """The policy in force: Retain keeps, then the declared one, then by ownership."""
    if life.retained:
        return DeletionPolicy.ORPHAN
    if life.declared_policy is not None:
        return life.declared_policy
    return DeletionPolicy.DELETE if life.scheduled else DeletionPolicy.ORPHAN


def expires_at(life: BackupLife) -> datetime | None:
    """When the Backup controller deletes the Backup and its archive; None: it never does.

    None for a Backup without a ttl, one not finished yet, one its schedule prunes,
    and one marked Retain.
    """
    if life.ttl is None or life.scheduled or life.retained:
        return None
    if life.phase not in FINISHED_PHASES or life.completed_at is None:
        return None
    return life.completed_at + life.ttl


def read_life(backup: Mapping[str, Any]) -> BackupLife:
    """What decides the Backup's retention, from the object.

    Raises:
        ValueError: ``spec.ttl`` or ``spec.deletionPolicy`` is invalid, the message
            naming the field and the rule.
    """
    metadata = backup.get("metadata") or {}
    spec = backup.get("spec") or {}
    status = backup.get("status") or {}
    declared = spec.get("deletionPolicy")
    if declared is not None and declared not in set(DeletionPolicy):
        msg = f"spec.deletionPolicy must be Orphan or Delete (got {declared!r})"
        raise ValueError(msg)
    try:
        ttl = parse_ttl(str(spec["ttl"])) if spec.get("ttl") else None
    except ValueError as error:
        raise ValueError(f"spec.{error}") from None
    return BackupLife(
        declared_policy=None if declared is None else DeletionPolicy(declared),
        ttl=ttl,
        phase=str(status.get("phase") or ""),
        completed_at=parse_timestamp(status.get("completedAt")),
        scheduled=any(
            ref.get("controller") and ref.get("kind") == SCHEDULE_KIND
            for ref in metadata.get("ownerReferences") or []
        ),
        retained=(metadata.get("annotations") or {}).get(DELETION_POLICY_ANNOTATION) == RETAIN,
    )
