"""The final-backup decisions of a BackupSchedule being deleted, and the final Backup's name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from provider.backup.controllers.final import (
    Action,
    FinalBackup,
    Outcome,
    Step,
    cannot_create,
    decide,
    final_backup_name,
)

DELETED = datetime(2026, 12, 3, 9, 30, 15, tzinfo=UTC)
TIMEOUT = timedelta(minutes=30)
NAME = "myctp-final-20261203093015"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class DecideCase:
    reason: str
    want: Step
    found: FinalBackup | None = None
    enabled: bool = True
    suspended: bool = False
    after: timedelta = timedelta(seconds=10)


DECIDE_CASES = [
    DecideCase(
        "A schedule with finalBackup false lets go at once and says no backup was taken.",
        Step(
            Action.RELEASE,
            outcome=Outcome.DISABLED,
            message="spec.finalBackup is false: no final backup was taken",
        ),
        enabled=False,
    ),
    DecideCase(
        "A suspended schedule takes no final backup.",
        Step(
            Action.RELEASE,
            outcome=Outcome.SUSPENDED,
            message="the schedule is suspended: no final backup was taken",
        ),
        suspended=True,
    ),
    DecideCase(
        "Without a final Backup yet, one is made, named after the deletion time.",
        Step(Action.CREATE, name=NAME, wait=TIMEOUT - timedelta(seconds=10)),
    ),
    DecideCase(
        "A running final Backup is waited for, at most the time left.",
        Step(Action.WAIT, name=NAME, wait=TIMEOUT - timedelta(minutes=20)),
        found=FinalBackup(NAME, "InProgress"),
        after=timedelta(minutes=20),
    ),
    DecideCase(
        "A final Backup that is still retrying is waited for.",
        Step(Action.WAIT, name=NAME, wait=TIMEOUT - timedelta(seconds=10)),
        found=FinalBackup(NAME, "Pending", "Instance team-a/myctp has no kubeconfig yet"),
    ),
    DecideCase(
        "A Completed final Backup releases the schedule: the data was saved.",
        Step(
            Action.RELEASE,
            name=NAME,
            outcome=Outcome.COMPLETED,
            message=f"final Backup {NAME} completed",
        ),
        found=FinalBackup(NAME, "Completed"),
    ),
    DecideCase(
        "A final Backup made before the schedule was suspended still counts once Completed.",
        Step(
            Action.RELEASE,
            name=NAME,
            outcome=Outcome.COMPLETED,
            message=f"final Backup {NAME} completed",
        ),
        found=FinalBackup(NAME, "Completed"),
        suspended=True,
        enabled=False,
    ),
    DecideCase(
        "A final Backup that failed its attempts releases, saying the data was not saved and why.",
        Step(
            Action.RELEASE,
            name=NAME,
            outcome=Outcome.FAILED,
            message=(
                f"the data was not saved: final Backup {NAME} failed: "
                "Instance team-a/myctp not found"
            ),
        ),
        found=FinalBackup(NAME, "Failed", "Instance team-a/myctp not found"),
    ),
    DecideCase(
        "A final Backup still running when the wait is over releases, saying it timed out.",
        Step(
            Action.RELEASE,
            name=NAME,
            outcome=Outcome.TIMED_OUT,
            message=(
                f"the data was not saved: final Backup {NAME} did not finish within 30m "
                "of the deletion; the schedule lets go"
            ),
        ),
        found=FinalBackup(NAME, "InProgress"),
        after=TIMEOUT,
    ),
    DecideCase(
        "A final Backup that could never be made releases at the timeout too.",
        Step(
            Action.RELEASE,
            name=NAME,
            outcome=Outcome.TIMED_OUT,
            message=(
                f"the data was not saved: final Backup {NAME} did not finish within 30m "
                "of the deletion; the schedule lets go"
            ),
        ),
        after=TIMEOUT + timedelta(hours=1),
    ),
]


@pytest.mark.parametrize("case", DECIDE_CASES, ids=lambda case: case.reason)
def test_a_deleted_schedule_creates_waits_for_or_releases_its_final_backup(
    case: DecideCase,
) -> None:
    step = decide(
        schedule="myctp",
        enabled=case.enabled,
        suspended=case.suspended,
        deleted_at=DELETED,
        now=DELETED + case.after,
        timeout=TIMEOUT,
        found=case.found,
    )
    assert step == case.want, case.reason


def test_a_final_backup_that_cannot_be_made_releases_at_once_saying_so() -> None:
    assert cannot_create(NAME, "its namespace is being deleted") == Step(
        Action.RELEASE,
        name=NAME,
        outcome=Outcome.FAILED,
        message=(
            f"the data was not saved: final Backup {NAME} cannot be made: "
            "its namespace is being deleted"
        ),
    )


@dataclass(frozen=True)
class OutcomeCase:
    reason: str
    outcome: Outcome
    saved: bool


OUTCOME_CASES = [
    OutcomeCase("A completed final Backup saved the data.", Outcome.COMPLETED, saved=True),
    OutcomeCase("A final Backup opted out of is no loss.", Outcome.DISABLED, saved=True),
    OutcomeCase("A suspended schedule's data is not at stake.", Outcome.SUSPENDED, saved=True),
    OutcomeCase("A failed final Backup did not save the data.", Outcome.FAILED, saved=False),
    OutcomeCase("A timed-out final Backup did not save the data.", Outcome.TIMED_OUT, saved=False),
]


@pytest.mark.parametrize("case", OUTCOME_CASES, ids=lambda case: case.reason)
def test_only_a_failed_or_timed_out_final_backup_says_the_data_was_not_saved(
    case: OutcomeCase,
) -> None:
    assert case.outcome.saved is case.saved


@dataclass(frozen=True)
class NameCase:
    reason: str
    schedule: str
    at: datetime
    want: str


NAME_CASES = [
    NameCase(
        "The name is <schedule>-final-<UTC yyyymmddhhmmss> of the deletion time.",
        "myctp",
        DELETED,
        NAME,
    ),
    NameCase(
        "A deletion time in another zone is written in UTC.",
        "myctp",
        datetime.fromisoformat("2026-12-03T10:30:15+01:00"),
        NAME,
    ),
    NameCase(
        "A long schedule name is cut and hashed; -final- and the time stay whole.",
        "a" * 60,
        DELETED,
        "a" * 33 + "-11ee3912-final-20261203093015",
    ),
]


@pytest.mark.parametrize("case", NAME_CASES, ids=lambda case: case.reason)
def test_the_final_backup_is_named_after_its_schedule_and_deletion_time(case: NameCase) -> None:
    name = final_backup_name(case.schedule, case.at)
    assert name == case.want
    assert len(name) <= 63 and DNS_LABEL.fullmatch(name), name


def test_two_long_schedules_that_differ_only_at_the_end_get_distinct_final_backups() -> None:
    first = final_backup_name("b" * 59 + "1", DELETED)
    second = final_backup_name("b" * 59 + "2", DELETED)
    assert first != second
    assert first.endswith("-final-20261203093015") and second.endswith("-final-20261203093015")


def test_a_naive_deletion_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        final_backup_name("myctp", datetime(2026, 12, 3, 9, 30))
