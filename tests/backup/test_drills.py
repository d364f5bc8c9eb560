"""A BackupSchedule's restore drills decided without servers: when, what, and how they end."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provider.backup.controllers import drills
from provider.backup.controllers.drills import Drill, Newest, Step, VerifySpec

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
VERIFY = VerifySpec(interval=DAY, deadline=timedelta(minutes=30))
NEWEST = Newest("myctp-20261204060000", NOW - timedelta(hours=6))
DRILL_NAME = drills.drill_name("myctp", NEWEST.name)
RUNNING = Drill(
    namespace="team-a",
    name=DRILL_NAME,
    schedule="myctp",
    backup=NEWEST.name,
    deadline=NOW + timedelta(minutes=20),
    restore_phase="InProgress",
    restore_message="",
    deleting=False,
)


def decide(**changes: Any) -> Step:
    arguments: dict[str, Any] = {
        "schedule": "myctp",
        "verify": VERIFY,
        "now": NOW,
        "last_drill_at": NOW - 2 * DAY,
        "newest": NEWEST,
        "mine": None,
        "busy_namespace": False,
        "running": 0,
        "max_drills": 2,
        "source_restoring": False,
    }
    return drills.step(**{**arguments, **changes})


@dataclass
class StepCase:
    reason: str
    changes: dict[str, Any]
    starts: bool
    deletes: bool
    checks: bool
    reason_written: str | None


STEP_CASES = [
    StepCase(
        "a drill that is due starts on the newest Completed Backup",
        {},
        True,
        False,
        False,
        drills.RUNNING,
    ),
    StepCase(
        "a schedule that never drilled drills at once",
        {"last_drill_at": None},
        True,
        False,
        False,
        drills.RUNNING,
    ),
    StepCase(
        "a drill not yet due waits for its interval",
        {"last_drill_at": NOW - DAY / 2},
        False,
        False,
        False,
        None,
    ),
    StepCase(
        "without a Completed Backup there is nothing to restore",
        {"newest": None},
        False,
        False,
        False,
        drills.NO_BACKUP,
    ),
    StepCase(
        "a real restore of the control plane holds the drill back",
        {"source_restoring": True},
        False,
        False,
        False,
        drills.WAITING,
    ),
    StepCase(
        "another drill in the namespace holds it back",
        {"busy_namespace": True},
        False,
        False,
        False,
        drills.WAITING,
    ),
    StepCase(
        "the global maximum of drills holds it back",
        {"running": 2},
        False,
        False,
        False,
        drills.WAITING,
    ),
    StepCase(
        "a drill whose restore runs is waited for", {"mine": RUNNING}, False, False, False, None
    ),
    StepCase(
        "a drill whose restore Completed is checked",
        {"mine": replace(RUNNING, restore_phase="Completed")},
        False,
        False,
        True,
        None,
    ),
    StepCase(
        "a drill whose restore failed is deleted, failing with the restore's words",
        {"mine": replace(RUNNING, restore_phase="Failed", restore_message="boom")},
        False,
        True,
        False,
        drills.FAILED,
    ),
    StepCase(
        "a drill past its deadline is deleted whatever it was doing",
        {"mine": replace(RUNNING, deadline=NOW - timedelta(seconds=1))},
        False,
        True,
        False,
        drills.DEADLINE_EXCEEDED,
    ),
    StepCase(
        "a drill whose deadline cannot be read is treated as past it",
        {"mine": replace(RUNNING, deadline=None)},
        False,
        True,
        False,
        drills.DEADLINE_EXCEEDED,
    ),
    StepCase(
        "a drill being deleted is left to go",
        {"mine": replace(RUNNING, deleting=True)},
        False,
        False,
        False,
        None,
    ),
]


@pytest.mark.parametrize("case", STEP_CASES, ids=lambda c: c.reason)
def test_a_schedule_drills_at_its_interval_within_its_bounds(case: StepCase) -> None:
    found = decide(**case.changes)

    assert (found.start is not None, found.delete is not None, found.check is not None) == (
        case.starts,
        case.deletes,
        case.checks,
    )
    assert (found.verdict.reason if found.verdict else None) == case.reason_written


def test_a_started_drill_restores_the_newest_backup_under_a_name_of_its_own_with_its_deadline() -> (
    None
):
    start = decide().start

    assert start == drills.Start(NEWEST.name, DRILL_NAME, NOW + VERIFY.deadline)
    assert DRILL_NAME.startswith("myctp-drill-")


def test_a_failed_restore_says_why_in_the_restores_own_words() -> None:
    found = decide(mine=replace(RUNNING, restore_phase="Failed", restore_message="cannot apply"))

    assert found.verdict == drills.Verdict(
        "False", drills.FAILED, f"Backup {NEWEST.name} did not restore: cannot apply"
    )


@dataclass
class CheckedCase:
    reason: str
    problems: list[str]
    final: bool
    status: str | None
    deletes: bool


CHECKED_CASES = [
    CheckedCase("a control plane that holds the archive passes and goes", [], False, "True", True),
    CheckedCase("problems before the deadline are looked at again", ["x"], False, None, False),
    CheckedCase("problems at the deadline fail the drill and it goes", ["x"], True, "False", True),
]


@pytest.mark.parametrize("case", CHECKED_CASES, ids=lambda c: c.reason)
def test_a_checked_drill_passes_looks_again_or_fails_and_the_throwaway_goes(
    case: CheckedCase,
) -> None:
    drill = replace(RUNNING, restore_phase="Completed")

    found = drills.checked(drill, case.problems, "said", final=case.final)

    assert (found.verdict.status if found.verdict else None) == case.status
    assert (found.delete is drill) == case.deletes
    if case.status == "True":
        assert found.verdict is not None
        assert found.verdict.verified_backup == NEWEST.name


def test_only_drills_past_their_deadline_and_not_yet_going_are_deleted_at_any_start() -> None:
    past = replace(RUNNING, name="past", deadline=NOW - timedelta(minutes=1))
    going = replace(past, name="going", deleting=True)
    unreadable = replace(RUNNING, name="unreadable", deadline=None)

    assert drills.expired([RUNNING, past, going, unreadable], NOW) == [past, unreadable]


@dataclass
class VerifyCase:
    reason: str
    verify: dict[str, Any] | None
    found: VerifySpec | None = None
    error: str = ""


VERIFY_CASES = [
    VerifyCase("no verify asks for no drills", None),
    VerifyCase(
        "an interval alone takes the default deadline",
        {"interval": "24h"},
        VerifySpec(DAY, drills.DEFAULT_DEADLINE),
    ),
    VerifyCase(
        "an interval and a deadline",
        {"interval": "168h", "deadline": "1h"},
        VerifySpec(7 * DAY, timedelta(hours=1)),
    ),
    VerifyCase(
        "an interval that is not a duration names the field",
        {"interval": "daily"},
        error="spec.verify.interval: ",
    ),
    VerifyCase(
        "an interval under an hour is refused",
        {"interval": "30m"},
        error="spec.verify.interval: must be at least 1:00:00",
    ),
    VerifyCase(
        "a deadline as long as the interval is refused",
        {"interval": "2h", "deadline": "2h"},
        error="spec.verify.deadline: must be above zero and below spec.verify.interval",
    ),
]


@pytest.mark.parametrize("case", VERIFY_CASES, ids=lambda c: c.reason)
def test_spec_verify_is_read_or_refused_naming_the_field(case: VerifyCase) -> None:
    spec = {} if case.verify is None else {"verify": case.verify}
    if case.error:
        with pytest.raises(drills.VerifyError, match=f"^{case.error}"):
            drills.parse_verify(spec)
    else:
        assert drills.parse_verify(spec) == case.found


SOURCE = {
    "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
    "kind": "Instance",
    "metadata": {
        "name": "myctp",
        "namespace": "team-a",
        "annotations": {"crossplane.io/external-name": "team-a-myctp"},
    },
    "spec": {
        "forProvider": {"crossplane": {"version": "2.1.4-up.2"}, "class": "small"},
        "providerConfigRef": {"kind": "ProviderConfig", "name": "space"},
        "writeConnectionSecretToRef": {"name": "myctp-kubeconfig"},
    },
}
SCHEDULE = {
    "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
    "kind": "BackupSchedule",
    "metadata": {"name": "myctp", "namespace": "team-a", "uid": "u-1"},
}


def test_the_throwaway_instance_restores_the_backup_and_never_names_the_source_plane() -> None:
    start = drills.Start(NEWEST.name, DRILL_NAME, NOW + VERIFY.deadline)

    instance = drills.throwaway_instance(SOURCE, SCHEDULE, start)

    assert instance["metadata"]["name"] == DRILL_NAME
    assert instance["spec"] == {
        "forProvider": {
            "crossplane": {"version": "2.1.4-up.2"},
            "class": "small",
            "initialRestorationFrom": {"backupRef": {"name": NEWEST.name}},
        },
        "writeConnectionSecretToRef": {"name": f"{DRILL_NAME}-kubeconfig"},
        "providerConfigRef": {"kind": "ProviderConfig", "name": "space"},
    }
    assert "team-a-myctp" not in str(instance)
    assert "myctp-kubeconfig" not in str(instance).replace(f"{DRILL_NAME}-kubeconfig", "")
    # The drill's state is on the Instance: any controller start finds and bounds it.
    assert drills.drill_record(instance) == Drill(
        "team-a", DRILL_NAME, "myctp", NEWEST.name, NOW + VERIFY.deadline, "", "", False
    )


@pytest.mark.parametrize(
    ("schedule", "reason"),
    [
        ("myctp", "a short name keeps the schedule's name whole"),
        ("a" * 63, "the longest name is cut so the drill's name stays a DNS label"),
        ("a" * 47 + "-b", "a name cut at a dash does not end in one"),
    ],
)
def test_a_drill_is_named_for_its_schedule_within_a_dns_label(schedule: str, reason: str) -> None:
    name = drills.drill_name(schedule, NEWEST.name)

    assert len(name) <= 63, reason
    assert name[0].isalnum() and name[-1].isalnum(), reason
    assert "-drill-" in name and name.startswith(schedule[:10]), reason
