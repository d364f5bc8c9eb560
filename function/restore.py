"""Which Backup a new control plane is restored from, when ``spec.restore`` names a control plane.

``spec.restore.fromControlPlane`` asks for the newest Completed Backup taken of
a control plane (scheduled or final) in the composite's namespace. It is
resolved here, in the function, from Backups that Crossplane fetches for it as
*required resources*: the function answers with a requirement (Backups in that
namespace carrying ``INSTANCE_LABEL`` for that control plane), Crossplane lists
them with its own client and calls the function again with them, and
``latest`` picks one. Why here rather than in the provider when it creates the
Instance:

- the Instance's API stays ``initialRestorationFrom.backupRef`` only, so the
  provider, the Space and ``controlplane-backup`` know one way to restore;
- the choice is made before anything is created and is visible in the
  composite's ``status.restore.backupName`` (and in the Instance's spec), not
  inside a controller; a person sees which Backup will be restored;
- once made, the choice is kept: from the observed Instance's ``backupRef``,
  or from the composite's own status while the Instance is not created yet. A
  newer Backup never changes it, since restore is creation-only;
- the choice is pure (no clock, no I/O), so it is tested as a table, and the
  composition stays a function of its request.

Nothing is composed from a control plane with no Completed Backup: the
Instance waits, and the composite says so and why (``why_none``: there is no
Backup of it at all, its newest one failed and how, or it is still running),
rather than coming up empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

BACKUP_API_VERSION = "controlplane.spaces.upbound.io/v1alpha1"
BACKUP_KIND = "Backup"
# The label the BackupSchedule controller puts on every Backup it makes, scheduled
# and final: the name of the Instance backed up. The provider spells it in
# provider.backup.controllers.schedules.INSTANCE_LABEL (the two never import each other; a
# test holds them equal).
INSTANCE_LABEL = "controlplane.spaces.upbound.io/instance"
# The name under which the function asks Crossplane for those Backups.
REQUIREMENT = "restore-backups"
COMPLETED = "Completed"
FAILED = "Failed"
_EARLIEST = datetime.min.replace(tzinfo=UTC)


class _Read(BaseModel):
    """A part of an object another controller writes: unknown fields are ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class _Metadata(_Read):
    name: str
    namespace: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: datetime | None = None


class _InstanceRef(_Read):
    name: str = ""


class _BackupSpec(_Read):
    instance_ref: _InstanceRef = _InstanceRef()


class _Condition(_Read):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""


class _BackupStatus(_Read):
    phase: str = ""
    completed_at: datetime | None = None
    conditions: list[_Condition] = Field(default_factory=list)


class BackupObject(_Read):
    """What the choice reads of a ``Backup``."""

    metadata: _Metadata
    spec: _BackupSpec = _BackupSpec()
    status: _BackupStatus = _BackupStatus()


@dataclass(frozen=True)
class Requirement:
    """Resources the function asks Crossplane to fetch: of one kind, in one namespace, by labels."""

    name: str
    api_version: str
    kind: str
    namespace: str
    match_labels: tuple[tuple[str, str], ...]


def requirement(namespace: str, instance: str) -> Requirement:
    """The Backups that may hold Instance ``instance``, in ``namespace``."""
    return Requirement(
        name=REQUIREMENT,
        api_version=BACKUP_API_VERSION,
        kind=BACKUP_KIND,
        namespace=namespace,
        match_labels=((INSTANCE_LABEL, instance),),
    )


def latest(backups: Iterable[Mapping[str, Any]], namespace: str, instance: str) -> str | None:
    """The name of the newest Completed Backup of Instance ``instance`` in ``namespace``, or None.

    Newest by completion time; of two completed at the same time, the greater
    name (a schedule's names end in their time). A Backup of another Instance,
    in another namespace, not Completed (Failed ones have a completion time
    too), or that cannot be read is never chosen. The label Crossplane selected
    by is checked again, with the Backup's own ``spec.instanceRef``: the label
    finds a control plane's Backups, the spec says what they hold.
    """
    candidates: list[tuple[datetime, str]] = []
    for backup in _of(backups, namespace, instance):
        completed_at = backup.status.completed_at
        if (
            backup.status.phase == COMPLETED
            and completed_at is not None
            and completed_at.tzinfo is not None
        ):
            candidates.append((completed_at, backup.metadata.name))
    return max(candidates)[1] if candidates else None


def why_none(backups: Iterable[Mapping[str, Any]], namespace: str, instance: str) -> str:
    """Why ``latest`` found no Backup of Instance ``instance``, as a person can act on it.

    There is no Backup of it at all; or its newest one (by creation, then
    completion, then name) failed, with the reason and message of its Failed
    condition; or its newest is still being written.
    """
    found = _of(backups, namespace, instance)
    if not found:
        return (
            "there is no Backup of it in that namespace (its spec.backup schedule makes "
            "them, and a final one is taken when it is deleted)"
        )
    newest = max(
        found,
        key=lambda b: (
            _moment(b.metadata.creation_timestamp),
            _moment(b.status.completed_at),
            b.metadata.name,
        ),
    )
    name, phase = newest.metadata.name, newest.status.phase
    if phase != FAILED:
        return f"its newest Backup, {name}, is {phase or 'not started yet'}"
    failed = next((c for c in newest.status.conditions if c.type == FAILED), None)
    if failed is None:
        return f"its newest Backup, {name}, failed"
    reason = failed.reason or FAILED
    return f"its newest Backup, {name}, failed ({reason}): {failed.message or reason}"


def _of(backups: Iterable[Mapping[str, Any]], namespace: str, instance: str) -> list[BackupObject]:
    """The Backups that can be read and hold Instance ``instance`` of ``namespace``."""
    found = []
    for raw in backups:
        try:
            backup = BackupObject.model_validate(raw)
        except ValidationError:
            continue
        if (
            backup.metadata.namespace == namespace
            and backup.metadata.labels.get(INSTANCE_LABEL) == instance
            and backup.spec.instance_ref.name == instance
        ):
            found.append(backup)
    return found


def _moment(value: datetime | None) -> datetime:
    """``value`` if it is an aware time, else the earliest one (it sorts first)."""
    if value is None or value.tzinfo is None:
        return _EARLIEST
    return value
