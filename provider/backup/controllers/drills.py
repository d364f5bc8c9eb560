"""Restore drills of a BackupSchedule (pure): when one starts, what it makes, how it ends.

A schedule with ``spec.verify`` proves its archives restore: at each
``interval`` the newest Completed Backup is restored into a throwaway hosted
control plane, an Instance the backup controller creates in the source's
namespace (so in the same Space, under the same provider config), named for
the drill, with ``initialRestorationFrom`` the Backup: the provider restores
it as it restores any Instance. Once the restore is Completed the control
plane is held to the archive (``verify.checks``); whatever the outcome the
throwaway Instance is then deleted, and the result goes into the schedule's
``status.lastVerifiedBackup`` and its ``Verified`` condition, in the failure's
own words.

The drill's state is the throwaway Instance itself: its labels name the
schedule, its annotations the Backup and the deadline. A controller killed
mid-drill keeps nothing in memory that matters: whichever controller starts
next finds the Instance, and deletes it once its deadline has passed
(``expired``) even if its schedule is gone.

Bounds: one drill per namespace at once, at most ``max_drills`` across the
cluster, none while the source control plane is being restored (a real
restore matters more, and shares the provider's restore slots), each within
its ``deadline``. A drill never names the source: it reads the Backup, never
the source Instance's control plane or kubeconfig.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from provider.backup.controllers.plan import COMPLETED, parse_ttl
from provider.runtime.timestamps import format_timestamp, parse_timestamp

# On a throwaway Instance: the schedule it drills for, the Backup it restores,
# and when it must be gone.
DRILL_OF = "controlplane.spaces.upbound.io/drill-of"
DRILL_BACKUP = "controlplane.spaces.upbound.io/drill-backup"
DRILL_DEADLINE = "controlplane.spaces.upbound.io/drill-deadline"
VERIFIED = "Verified"
DEFAULT_DEADLINE = timedelta(minutes=30)
# An interval shorter than this would keep a throwaway control plane up most of the time.
MIN_INTERVAL = timedelta(hours=1)
DEFAULT_MAX_DRILLS = 2
# The longest DNS-1123 label: an Instance's name is a Space control plane's.
MAX_NAME_LENGTH = 63
_SUFFIX = "-drill-"
_DIGEST_LENGTH = 8

# Reasons of the Verified condition.
PASSED = "DrillPassed"
FAILED = "DrillFailed"
RUNNING = "DrillRunning"
WAITING = "DrillWaiting"
DEADLINE_EXCEEDED = "DrillDeadlineExceeded"
NO_BACKUP = "NoCompletedBackup"
INVALID = "InvalidVerify"


class VerifyError(ValueError):
    """``spec.verify`` is not one a drill can run by; the message names the field."""


@dataclass(frozen=True)
class VerifySpec:
    """``spec.verify``: how often a drill runs, and how long one may take."""

    interval: timedelta
    deadline: timedelta = DEFAULT_DEADLINE


def parse_verify(spec: Mapping[str, Any]) -> VerifySpec | None:
    """A schedule's ``spec.verify``; None when it asks for no drills."""
    verify = spec.get("verify")
    if not verify:
        return None
    try:
        interval = parse_ttl(str(verify.get("interval") or ""))
    except ValueError as error:
        msg = f"spec.verify.interval: {error}"
        raise VerifyError(msg) from None
    if interval < MIN_INTERVAL:
        msg = f"spec.verify.interval: must be at least {MIN_INTERVAL}, not {interval}"
        raise VerifyError(msg)
    deadline = DEFAULT_DEADLINE
    if verify.get("deadline"):
        try:
            deadline = parse_ttl(str(verify["deadline"]))
        except ValueError as error:
            msg = f"spec.verify.deadline: {error}"
            raise VerifyError(msg) from None
    if deadline <= timedelta(0) or deadline >= interval:
        msg = "spec.verify.deadline: must be above zero and below spec.verify.interval"
        raise VerifyError(msg)
    return VerifySpec(interval, deadline)


def drill_name(schedule: str, backup: str) -> str:
    """The throwaway Instance's name: the schedule's, ``-drill-`` and a digest of the Backup's."""
    digest = hashlib.sha256(backup.encode()).hexdigest()[:_DIGEST_LENGTH]
    head = schedule[: MAX_NAME_LENGTH - len(_SUFFIX) - _DIGEST_LENGTH].rstrip("-.")
    return f"{head}{_SUFFIX}{digest}"


@dataclass(frozen=True)
class Drill:
    """A throwaway Instance found in the cluster: where its drill stands."""

    namespace: str
    name: str
    schedule: str
    backup: str
    # None when the annotation is missing or unreadable: treated as expired.
    deadline: datetime | None
    # Its restore's phase (status.atProvider.restore.phase), empty before it starts.
    restore_phase: str
    # The Restored condition's message, for a failed restore.
    restore_message: str
    deleting: bool

    def expired(self, now: datetime) -> bool:
        """Whether it must be gone by now."""
        return self.deadline is None or now >= self.deadline


def drill_record(instance: Mapping[str, Any]) -> Drill:
    """What a drill's state is, read from its throwaway Instance."""
    metadata = instance.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    restore = ((instance.get("status") or {}).get("atProvider") or {}).get("restore") or {}
    restored: Mapping[str, Any] = next(
        (
            c
            for c in (instance.get("status") or {}).get("conditions") or []
            if c.get("type") == "Restored"
        ),
        {},
    )
    return Drill(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        schedule=str(labels.get(DRILL_OF) or ""),
        backup=str(annotations.get(DRILL_BACKUP) or ""),
        deadline=parse_timestamp(annotations.get(DRILL_DEADLINE)),
        restore_phase=str(restore.get("phase") or ""),
        restore_message=str(restored.get("message") or restore.get("message") or ""),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def expired(drills: Sequence[Drill], now: datetime) -> list[Drill]:
    """The throwaway Instances past their deadline and not yet being deleted: delete them."""
    return [d for d in drills if d.expired(now) and not d.deleting]


@dataclass(frozen=True)
class Verdict:
    """The ``Verified`` condition, and the Backup a passed drill verified."""

    status: str
    reason: str
    message: str
    verified_backup: str = ""


@dataclass(frozen=True)
class Start:
    """Start a drill of ``backup`` in a throwaway Instance named ``name``."""

    backup: str
    name: str
    deadline: datetime


@dataclass(frozen=True)
class Step:
    """What a schedule's drill does now.

    At most one of ``start``, ``check`` and ``delete`` is set; ``verdict`` is
    the condition to write (None: leave it), ``wait`` when to look again.
    """

    start: Start | None = None
    # The drill whose restore Completed: hold its control plane to the archive now.
    check: Drill | None = None
    # A drill that is over (passed, failed or past its deadline): delete it.
    delete: Drill | None = None
    verdict: Verdict | None = None
    wait: timedelta | None = None


@dataclass(frozen=True)
class Newest:
    """The newest Completed Backup of the schedule."""

    name: str
    completed_at: datetime


def step(
    *,
    schedule: str,
    verify: VerifySpec,
    now: datetime,
    last_drill_at: datetime | None,
    newest: Newest | None,
    mine: Drill | None,
    busy_namespace: bool,
    running: int,
    max_drills: int,
    source_restoring: bool,
) -> Step:
    """The next step of a schedule's drills.

    Args:
        schedule: the schedule's name.
        verify: its ``spec.verify``.
        now: the time.
        last_drill_at: when its last drill ended (status), None if none has.
        newest: its newest Completed Backup, None if it has none.
        mine: its drill in progress (its throwaway Instance), if any.
        busy_namespace: another schedule's drill runs in the namespace.
        running: drills running across the cluster.
        max_drills: the most drills at once across the cluster.
        source_restoring: the source control plane is being restored.
    """
    if mine is not None:
        return _follow(mine, now)
    due = last_drill_at + verify.interval if last_drill_at is not None else now
    if now < due:
        return Step(wait=due - now)
    if newest is None:
        return Step(
            verdict=Verdict(
                "False", NO_BACKUP, "no Completed Backup to restore yet: the drill waits for one"
            ),
            wait=min(verify.interval, timedelta(minutes=5)),
        )
    why_not = _held_back(busy_namespace, running, max_drills, source_restoring)
    if why_not:
        return Step(
            verdict=Verdict("Unknown", WAITING, f"a drill is due and waits: {why_not}"),
            wait=timedelta(minutes=1),
        )
    name = drill_name(schedule, newest.name)
    return Step(
        start=Start(newest.name, name, now + verify.deadline),
        verdict=Verdict(
            "Unknown",
            RUNNING,
            f"restoring Backup {newest.name} into the throwaway control plane {name}",
        ),
        wait=timedelta(seconds=30),
    )


def _held_back(busy_namespace: bool, running: int, max_drills: int, restoring: bool) -> str:
    if restoring:
        return "the control plane is being restored"
    if busy_namespace:
        return "another drill runs in this namespace"
    if running >= max_drills:
        return f"{running} drills run already, the most at once"
    return ""


def _follow(drill: Drill, now: datetime) -> Step:
    if drill.deleting:
        # Already ending: its verdict was written before it was deleted.
        return Step(wait=timedelta(seconds=30))
    if drill.expired(now):
        return Step(
            delete=drill,
            verdict=Verdict(
                "False",
                DEADLINE_EXCEEDED,
                f"the drill of Backup {drill.backup} did not finish before its deadline "
                f"{_at(drill.deadline)}: the throwaway control plane {drill.name} is deleted",
            ),
        )
    if drill.restore_phase == "Failed":
        return Step(
            delete=drill,
            verdict=Verdict(
                "False",
                FAILED,
                f"Backup {drill.backup} did not restore: {drill.restore_message or 'no message'}",
            ),
        )
    if drill.restore_phase == COMPLETED:
        return Step(check=drill)
    wait = timedelta(seconds=30)
    if drill.deadline is not None:
        wait = min(wait, drill.deadline - now)
    return Step(wait=max(wait, timedelta(seconds=1)))


def checked(drill: Drill, problems: Sequence[str], summary: str, *, final: bool) -> Step:
    """The step after holding a drill's control plane to its archive.

    A check that finds problems before the deadline looks again (packages
    install, CRDs get served); ``final`` (the deadline is near or past) ends it.
    """
    if not problems:
        return Step(
            delete=drill,
            verdict=Verdict(
                "True",
                PASSED,
                f"Backup {drill.backup} restored into a throwaway control plane: {summary}",
                verified_backup=drill.backup,
            ),
        )
    if not final:
        return Step(wait=timedelta(seconds=10))
    return Step(
        delete=drill,
        verdict=Verdict(
            "False", FAILED, f"Backup {drill.backup} restored but failed its check: {summary}"
        ),
    )


def _at(when: datetime | None) -> str:
    return format_timestamp(when) if when is not None else "(unreadable)"


def throwaway_instance(
    source: Mapping[str, Any], schedule: Mapping[str, Any], start: Start
) -> dict[str, Any]:
    """A drill's throwaway Instance: the source's Crossplane and class, restored from the Backup.

    Nothing of the source's control plane is named: not its external name, not
    its connection secret. It is owned by the schedule (deleting the schedule
    takes it too) and carries its drill's state.
    """
    source_spec = source.get("spec") or {}
    for_provider = source_spec.get("forProvider") or {}
    metadata = schedule["metadata"]
    spec: dict[str, Any] = {
        "forProvider": {
            **{k: for_provider[k] for k in ("crossplane", "class") if k in for_provider},
            "initialRestorationFrom": {"backupRef": {"name": start.backup}},
        },
        "writeConnectionSecretToRef": {"name": kubeconfig_secret_name(start.name)},
    }
    if source_spec.get("providerConfigRef"):
        spec["providerConfigRef"] = dict(source_spec["providerConfigRef"])
    return {
        "apiVersion": source["apiVersion"],
        "kind": source["kind"],
        "metadata": {
            "name": start.name,
            "namespace": metadata["namespace"],
            "labels": {DRILL_OF: metadata["name"]},
            "annotations": {
                DRILL_BACKUP: start.backup,
                DRILL_DEADLINE: format_timestamp(start.deadline),
            },
            "ownerReferences": [
                {
                    "apiVersion": schedule["apiVersion"],
                    "kind": schedule["kind"],
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                }
            ],
        },
        "spec": spec,
    }


def kubeconfig_secret_name(drill: str) -> str:
    """The Secret the provider writes a throwaway control plane's kubeconfig into."""
    return f"{drill}-kubeconfig"
