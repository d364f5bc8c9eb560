"""What a restore does next and what it tells the Instance: pure decisions, no I/O.

A restore is a plan of named steps in the contract's order (``namespaces``,
``configmaps``, ``secrets``, ``packages``, ``definitions``, ``claims``,
``composites``, ``managed``, ``resources``), then ``unpause``. Its progress is
recorded in the Instance's ``status.atProvider.restore``; a restore interrupted
by a restart starts again at the step recorded there (every earlier step was
finished, and applying a step again is idempotent). Progress is written at a
bounded rate: on every change of step or phase, otherwise at most once per
interval. The ``Restored`` condition says where the restore stands in words a
person can act on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from provider.backup.format import archive
from provider.backup.format.archive import ResourceType

Phase = Literal["InProgress", "Completed", "Failed"]
IN_PROGRESS: Phase = "InProgress"
COMPLETED: Phase = "Completed"
FAILED: Phase = "Failed"

UNPAUSE = "unpause"
RESTORED = "Restored"
REASON_PENDING = "RestorePending"
REASON_IN_PROGRESS = "RestoreInProgress"
REASON_COMPLETED = "RestoreCompleted"
REASON_FAILED = "RestoreFailed"

# Within the contract's last phase: claims, then composites, then managed resources.
_CATEGORY_ORDER = ("claim", "composite", "managed")
_PHASE_NAMES = ("namespaces", "configmaps", "secrets", "packages", "definitions")
_LAST_PHASE_NAMES = ("claims", "composites", "managed", "resources")


def order(rtype: ResourceType) -> tuple[int, int]:
    """The contract's order: namespaces, configmaps, secrets, packages, XRDs, then the rest."""
    within = next(
        (i for i, category in enumerate(_CATEGORY_ORDER) if category in rtype.categories),
        len(_CATEGORY_ORDER),
    )
    return archive.restore_phase(rtype), within


def step_name(rtype: ResourceType) -> str:
    """The name of the step that applies ``rtype``'s objects."""
    phase, within = order(rtype)
    if phase < len(_PHASE_NAMES):
        return _PHASE_NAMES[phase]
    return _LAST_PHASE_NAMES[within]


@dataclass(frozen=True)
class Step:
    """One step of a restore: the archive folders it applies, and how many objects."""

    name: str
    folders: frozenset[str]
    objects: int


def plan(types: Mapping[str, ResourceType], counts: Mapping[str, int]) -> list[Step]:
    """The steps of a restore of an archive with ``types`` and ``counts`` per folder, in order.

    Only steps with a type in the archive are planned; ``unpause`` always ends it.
    """
    steps: dict[tuple[int, int], set[str]] = {}
    for folder, rtype in types.items():
        steps.setdefault(order(rtype), set()).add(folder)
    planned = [
        Step(
            step_name(types[next(iter(folders))]),
            frozenset(folders),
            sum(counts.get(folder, 0) for folder in folders),
        )
        for _, folders in sorted(steps.items())
    ]
    return [*planned, Step(UNPAUSE, frozenset(), 0)]


@dataclass(frozen=True)
class Resume:
    """Where a restore starts: the index of its first step, and the objects already applied."""

    step: int
    applied: int
    started_at: str | None


def resume_point(
    steps: Sequence[Step], recorded: Mapping[str, Any] | None, backup_name: str
) -> Resume:
    """Where to start, given the ``status.atProvider.restore`` a previous run recorded.

    A run of the same Backup that stopped (a restart, or a failure) at a step of
    this plan starts again at that step: every step before it was finished. Any
    other record (none, another Backup, a step this plan does not have) starts
    from the first step.
    """
    record = recorded or {}
    if record.get("backupName") != backup_name or record.get("phase") not in (IN_PROGRESS, FAILED):
        return Resume(0, 0, None)
    names = [step.name for step in steps]
    reached = record.get("step")
    if reached not in names:
        return Resume(0, 0, None)
    index = names.index(reached)
    started = record.get("startedAt")
    return Resume(index, sum(step.objects for step in steps[:index]), started if started else None)


@dataclass(frozen=True)
class Progress:
    """A restore's state, as ``status.atProvider.restore`` records it."""

    backup_name: str
    phase: Phase
    step: str
    applied: int
    total: int
    started_at: str
    message: str = ""
    completed_at: str = ""

    def record(self) -> dict[str, Any]:
        """The ``status.atProvider.restore`` object."""
        recorded: dict[str, Any] = {
            "backupName": self.backup_name,
            "phase": self.phase,
            "step": self.step,
            "applied": self.applied,
            "total": self.total,
            "startedAt": self.started_at,
        }
        if self.message:
            recorded["message"] = self.message
        if self.completed_at:
            recorded["completedAt"] = self.completed_at
        return recorded

    def failed(self, message: str) -> Progress:
        """The same restore, failed at the step it reached."""
        return replace(self, phase=FAILED, message=message)


@dataclass(frozen=True)
class Throttle:
    """Writes progress at a bounded rate: at each step or phase change, else every ``interval``."""

    interval: float
    last_at: float | None = None
    last: Progress | None = None

    def due(self, progress: Progress, now: float) -> bool:
        """Whether ``progress`` is to be written at monotonic time ``now``."""
        if self.last is None or self.last_at is None:
            return True
        if progress == self.last:
            return False
        if (progress.phase, progress.step) != (self.last.phase, self.last.step):
            return True
        return now - self.last_at >= self.interval

    def wrote(self, progress: Progress, now: float) -> Throttle:
        """The throttle after writing ``progress`` at ``now``."""
        return Throttle(self.interval, now, progress)


@dataclass(frozen=True)
class Verdict:
    """A ``Restored`` condition: crossplane-runtime's shape, set on the Instance."""

    status: Literal["True", "False"]
    reason: str
    message: str


def pending(backup_name: str, waiting_for: str) -> Verdict:
    """The restore has not started: what it waits for."""
    return Verdict("False", REASON_PENDING, f"Backup {backup_name} is restored once {waiting_for}")


def verdict(progress: Progress) -> Verdict:
    """Where ``progress`` stands, in words a person can act on."""
    backup = progress.backup_name
    if progress.phase == COMPLETED:
        return Verdict(
            "True", REASON_COMPLETED, f"restored {progress.total} objects from Backup {backup}"
        )
    if progress.phase == FAILED and not progress.step:
        return Verdict(
            "False",
            REASON_FAILED,
            f"restore from Backup {backup} failed before applying anything: {progress.message}; "
            "it is retried",
        )
    if progress.phase == FAILED:
        return Verdict(
            "False",
            REASON_FAILED,
            f"restore from Backup {backup} failed at step {progress.step}: {progress.message}; "
            "it is retried from that step (objects applied so far stay)",
        )
    if progress.step == UNPAUSE:
        doing = "unpausing the managed resources the restore paused"
    else:
        doing = f"step {progress.step}, {progress.applied} of {progress.total} objects applied"
    return Verdict("False", REASON_IN_PROGRESS, f"restoring Backup {backup}: {doing}")
