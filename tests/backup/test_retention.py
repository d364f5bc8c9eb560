"""A Backup's deletion policy and expiry (pure): what its spec, status and owner say."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provider.backup.controllers.retention import (
    BackupLife,
    DeletionPolicy,
    deletion_policy,
    expires_at,
    read_life,
)

DONE = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
SCHEDULE_OWNER = {
    "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
    "kind": "BackupSchedule",
    "name": "myctp",
    "uid": "u-1",
    "controller": True,
}
RETAINED = {"controlplane.spaces.upbound.io/deletion-policy": "Retain"}


def backup(
    *,
    spec: dict[str, Any] | None = None,
    phase: str = "Completed",
    completed_at: str | None = "2026-12-04T06:00:00Z",
    owners: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if completed_at is not None:
        status["completedAt"] = completed_at
    return {
        "metadata": {
            "name": "myctp-1",
            "namespace": "team-a",
            "ownerReferences": owners or [],
            "annotations": annotations or {},
        },
        "spec": {"instanceRef": {"name": "myctp"}, **(spec or {})},
        "status": status,
    }


@dataclass(frozen=True)
class LifeCase:
    reason: str
    backup: dict[str, Any]
    policy: DeletionPolicy
    expires: datetime | None


LIFE_CASES = [
    LifeCase(
        "A Backup made by hand, with neither field, keeps its archive and never expires.",
        backup(),
        DeletionPolicy.ORPHAN,
        None,
    ),
    LifeCase(
        "A Backup made by hand with deletionPolicy Delete deletes its archive when deleted.",
        backup(spec={"deletionPolicy": "Delete"}),
        DeletionPolicy.DELETE,
        None,
    ),
    LifeCase(
        "A Completed Backup with a ttl expires the ttl after it completed.",
        backup(spec={"ttl": "1m"}),
        DeletionPolicy.ORPHAN,
        DONE + timedelta(minutes=1),
    ),
    LifeCase(
        "A ttl of hours and minutes is counted in full, fractions too.",
        backup(spec={"ttl": "1h30m", "deletionPolicy": "Delete"}),
        DeletionPolicy.DELETE,
        DONE + timedelta(hours=1, minutes=30),
    ),
    LifeCase(
        "A Failed Backup (no archive) expires like a Completed one, from when it failed.",
        backup(spec={"ttl": "1.5h"}, phase="Failed"),
        DeletionPolicy.ORPHAN,
        DONE + timedelta(minutes=90),
    ),
    LifeCase(
        "A Backup still running has no expiry yet: the ttl counts from completion.",
        backup(spec={"ttl": "1m"}, phase="InProgress", completed_at=None),
        DeletionPolicy.ORPHAN,
        None,
    ),
    LifeCase(
        "A Pending Backup retrying has no expiry, even with a stale completedAt.",
        backup(spec={"ttl": "1m"}, phase="Pending"),
        DeletionPolicy.ORPHAN,
        None,
    ),
    LifeCase(
        "A schedule's Backup defaults to Delete and is left to its schedule to prune.",
        backup(spec={"ttl": "1m"}, owners=[SCHEDULE_OWNER]),
        DeletionPolicy.DELETE,
        None,
    ),
    LifeCase(
        "A schedule's Backup that declares Orphan keeps its archive.",
        backup(spec={"deletionPolicy": "Orphan"}, owners=[SCHEDULE_OWNER]),
        DeletionPolicy.ORPHAN,
        None,
    ),
    LifeCase(
        "Only the controlling owner counts: a schedule that merely owns it is not its schedule.",
        backup(spec={"ttl": "1m"}, owners=[{**SCHEDULE_OWNER, "controller": False}]),
        DeletionPolicy.ORPHAN,
        DONE + timedelta(minutes=1),
    ),
    LifeCase(
        "A Backup marked Retain keeps its archive over a declared Delete and never expires.",
        backup(spec={"ttl": "1m", "deletionPolicy": "Delete"}, annotations=RETAINED),
        DeletionPolicy.ORPHAN,
        None,
    ),
    LifeCase(
        "A final Backup (Orphan, no ttl, no owner) outlives everything.",
        backup(spec={"deletionPolicy": "Orphan"}),
        DeletionPolicy.ORPHAN,
        None,
    ),
    LifeCase(
        "A ttl of zero expires the Backup as soon as it finished.",
        backup(spec={"ttl": "0s"}),
        DeletionPolicy.ORPHAN,
        DONE,
    ),
]


@pytest.mark.parametrize("case", LIFE_CASES, ids=lambda case: case.reason)
def test_a_backups_policy_and_expiry_follow_its_spec_status_and_owner(case: LifeCase) -> None:
    life = read_life(case.backup)
    assert deletion_policy(life) is case.policy
    assert expires_at(life) == case.expires


@dataclass(frozen=True)
class BadCase:
    reason: str
    spec: dict[str, Any]
    message: str


BAD_CASES = [
    BadCase(
        "A ttl that is not a Go duration names spec.ttl.",
        {"ttl": "a week"},
        "spec.ttl must be a Go duration such as 168h, 90m or 1h30m (got 'a week')",
    ),
    BadCase(
        "A negative ttl names spec.ttl.",
        {"ttl": "-1h"},
        "spec.ttl must not be negative (got '-1h')",
    ),
    BadCase(
        "A policy other than Orphan or Delete names spec.deletionPolicy.",
        {"deletionPolicy": "Retain"},
        "spec.deletionPolicy must be Orphan or Delete (got 'Retain')",
    ),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda case: case.reason)
def test_a_bad_ttl_or_policy_is_refused_naming_the_field(case: BadCase) -> None:
    with pytest.raises(ValueError) as raised:
        read_life(backup(spec=case.spec))
    assert str(raised.value) == case.message


def test_expiry_keeps_the_completion_time_zone_aware_across_a_day_boundary() -> None:
    """A ttl that crosses midnight and a month end lands on the right UTC instant."""
    life = BackupLife(
        declared_policy=None,
        ttl=timedelta(hours=168),
        phase="Completed",
        completed_at=datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC),
        scheduled=False,
        retained=False,
    )
    assert expires_at(life) == datetime(2026, 12, 7, 23, 59, 59, tzinfo=UTC)
