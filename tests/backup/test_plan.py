"""The BackupSchedule's decisions: what is due, what has expired, what status reports.

The table's schedule fires hourly ("0 * * * *") with a TTL of two hours; the
simulation drives a fake clock minute by minute and carries out each plan on
an in-memory list of Backups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from provider.backup.controllers.cron import Cron
from provider.backup.controllers.plan import (
    BackupRecord,
    SchedulePlan,
    backup_name,
    parse_ttl,
    plan,
)

HOURLY = Cron.parse("0 * * * *")
TTL = timedelta(hours=2)
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    """A time on 5 January 2026 (UTC)."""
    return datetime(2026, 1, 5, hour, minute, second, tzinfo=UTC)


def scheduled(hour: int, phase: str = "Completed") -> BackupRecord:
    """The schedule's own Backup for ``hour``:00, finished five minutes later."""
    done = at(hour, 5) if phase in {"Completed", "Failed"} else None
    return BackupRecord(f"myctp-20260105{hour:02}0000", at(hour), phase, done, TTL)


MIDNIGHT = at(0)


@dataclass
class PlanCase:
    reason: str
    now: datetime
    expected: SchedulePlan
    created_at: datetime = MIDNIGHT
    last_schedule_time: datetime | None = None
    suspend: bool = False
    backups: list[BackupRecord] = field(default_factory=list)


PLAN_CASES = [
    PlanCase(
        reason="the first firing after the schedule was created makes the first Backup",
        created_at=at(9, 10),
        now=at(10, 0, 2),
        expected=SchedulePlan(
            create="myctp-20260105100000",
            scheduled_for=at(10),
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105100000",
            last_successful_backup=None,
        ),
    ),
    PlanCase(
        reason="nothing is due before the first firing",
        created_at=at(9, 10),
        now=at(9, 59, 59),
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(10),
            last_backup=None,
            last_successful_backup=None,
        ),
    ),
    PlanCase(
        reason="a firing before the schedule was created is never run",
        created_at=at(10, 0, 30),
        now=at(10, 5),
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup=None,
            last_successful_backup=None,
        ),
    ),
    PlanCase(
        reason="nothing is due when the latest firing was already acted on",
        last_schedule_time=at(10),
        now=at(10, 45),
        backups=[scheduled(10)],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105100000",
            last_successful_backup="myctp-20260105100000",
            last_finished_backup="myctp-20260105100000",
        ),
    ),
    PlanCase(
        reason="the next firing is due at its minute",
        last_schedule_time=at(10),
        now=at(11),
        backups=[scheduled(10)],
        expected=SchedulePlan(
            create="myctp-20260105110000",
            scheduled_for=at(11),
            delete=(),
            next_run=at(12),
            last_backup="myctp-20260105110000",
            last_successful_backup="myctp-20260105100000",
            last_finished_backup="myctp-20260105100000",
        ),
    ),
    PlanCase(
        reason="a firing stays due until it is acted on",
        last_schedule_time=at(10),
        now=at(11, 59, 59),
        backups=[scheduled(10)],
        expected=SchedulePlan(
            create="myctp-20260105110000",
            scheduled_for=at(11),
            delete=(),
            next_run=at(12),
            last_backup="myctp-20260105110000",
            last_successful_backup="myctp-20260105100000",
            last_finished_backup="myctp-20260105100000",
        ),
    ),
    PlanCase(
        reason="several missed firings collapse into one Backup for the latest",
        last_schedule_time=at(5),
        now=at(9, 30),
        backups=[scheduled(5, "InProgress")],
        expected=SchedulePlan(
            create="myctp-20260105090000",
            scheduled_for=at(9),
            delete=(),
            next_run=at(10),
            last_backup="myctp-20260105090000",
            last_successful_backup=None,
        ),
    ),
    PlanCase(
        reason="a Backup already made for the due firing is not made again after a restart",
        last_schedule_time=at(9),
        now=at(10, 1),
        backups=[scheduled(9), scheduled(10, "Pending")],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105100000",
            last_successful_backup="myctp-20260105090000",
            last_finished_backup="myctp-20260105090000",
        ),
    ),
    PlanCase(
        reason="a suspended schedule makes nothing and has no next run",
        last_schedule_time=at(9),
        now=at(10, 1),
        suspend=True,
        backups=[scheduled(9)],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=None,
            last_backup="myctp-20260105090000",
            last_successful_backup="myctp-20260105090000",
            last_finished_backup="myctp-20260105090000",
        ),
    ),
    PlanCase(
        reason="a suspended schedule still deletes expired Backups",
        last_schedule_time=at(7),
        now=at(10, 1),
        suspend=True,
        backups=[scheduled(7), scheduled(8)],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=("myctp-20260105070000",),
            next_run=None,
            last_backup="myctp-20260105080000",
            last_successful_backup="myctp-20260105080000",
            last_finished_backup="myctp-20260105080000",
        ),
    ),
    PlanCase(
        reason="completed and failed Backups go once expired, in name order",
        last_schedule_time=at(10),
        now=at(10, 5),
        backups=[scheduled(10), scheduled(8, "Failed"), scheduled(7), scheduled(9)],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=("myctp-20260105070000", "myctp-20260105080000"),
            next_run=at(11),
            last_backup="myctp-20260105100000",
            last_successful_backup="myctp-20260105100000",
            last_finished_backup="myctp-20260105100000",
        ),
    ),
    PlanCase(
        reason="a Backup is kept until the minute before it expires",
        last_schedule_time=at(10),
        now=at(10, 4, 59),
        backups=[scheduled(8)],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105080000",
            last_successful_backup="myctp-20260105080000",
            last_finished_backup="myctp-20260105080000",
        ),
    ),
    PlanCase(
        reason="Backups still pending or in progress are never deleted, however old",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[
            BackupRecord("myctp-20260105010000", at(1), "Pending", at(1, 5), TTL),
            BackupRecord("myctp-20260105020000", at(2), "InProgress", at(2, 5), TTL),
            BackupRecord("myctp-20260105030000", at(3), "", at(3, 5), TTL),
        ],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105030000",
            last_successful_backup=None,
        ),
    ),
    PlanCase(
        reason="a finished Backup without a completion time has no expiry",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[BackupRecord("myctp-20260105010000", at(1), "Failed", None, TTL)],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105010000",
            last_successful_backup=None,
            last_finished_backup="myctp-20260105010000",
        ),
    ),
    PlanCase(
        reason="a Backup's own TTL decides its expiry",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[
            BackupRecord("short", None, "Completed", at(10), timedelta(minutes=30)),
            BackupRecord("long", None, "Completed", at(1), timedelta(hours=12)),
        ],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=("short",),
            next_run=at(11),
            last_backup="long",
            last_successful_backup="long",
            last_finished_backup="long",
        ),
    ),
    PlanCase(
        reason="a Backup without a TTL of its own expires by the schedule's",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[
            BackupRecord("made-by-hand", None, "Completed", at(8, 30), None),
            BackupRecord("made-by-hand-later", None, "Completed", at(8, 31), None),
        ],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=("made-by-hand",),
            next_run=at(11),
            last_backup="made-by-hand-later",
            last_successful_backup="made-by-hand-later",
            last_finished_backup="made-by-hand-later",
        ),
    ),
    PlanCase(
        reason="the newest Backup is chosen by firing time, not by name",
        last_schedule_time=at(10),
        now=at(10, 4),
        backups=[
            BackupRecord("b-older", at(8), "Completed", at(8, 5), TTL),
            BackupRecord("a-newer", at(9), "Completed", at(9, 5), TTL),
        ],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="a-newer",
            last_successful_backup="a-newer",
            last_finished_backup="a-newer",
        ),
    ),
    PlanCase(
        reason="the newest successful Backup skips a newer failed one",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[scheduled(9), scheduled(10, "Failed")],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105100000",
            last_successful_backup="myctp-20260105090000",
            last_finished_backup="myctp-20260105100000",
        ),
    ),
    PlanCase(
        reason="the newest finished Backup stays the failed one while a newer one runs: "
        "the next attempt does not hide a failure",
        last_schedule_time=at(11),
        now=at(11, 2),
        backups=[scheduled(9), scheduled(10, "Failed"), scheduled(11, "InProgress")],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(12),
            last_backup="myctp-20260105110000",
            last_successful_backup="myctp-20260105090000",
            last_finished_backup="myctp-20260105100000",
        ),
    ),
    PlanCase(
        reason="Backups made by hand rank below scheduled ones, and by name among themselves",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[
            BackupRecord("zz-by-hand", None, "Completed", at(10, 20), TTL),
            scheduled(9),
            BackupRecord("zy-by-hand", None, "Completed", at(10, 25), TTL),
        ],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105090000",
            last_successful_backup="myctp-20260105090000",
            last_finished_backup="myctp-20260105090000",
        ),
    ),
    PlanCase(
        reason="Backups made by hand alone are ranked by name",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[
            BackupRecord("zz-by-hand", None, "Completed", at(10, 20), TTL),
            BackupRecord("zy-by-hand", None, "Completed", at(10, 25), TTL),
        ],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=(),
            next_run=at(11),
            last_backup="zz-by-hand",
            last_successful_backup="zz-by-hand",
            last_finished_backup="zz-by-hand",
        ),
    ),
    PlanCase(
        reason="a Backup being deleted is no longer the last successful one",
        last_schedule_time=at(10),
        now=at(10, 30),
        backups=[scheduled(8), scheduled(10, "InProgress")],
        expected=SchedulePlan(
            create=None,
            scheduled_for=None,
            delete=("myctp-20260105080000",),
            next_run=at(11),
            last_backup="myctp-20260105100000",
            last_successful_backup=None,
        ),
    ),
    PlanCase(
        reason="times in other offsets are read as their UTC instants",
        created_at=datetime(2026, 1, 5, 10, 10, tzinfo=timezone(timedelta(hours=2))),
        now=datetime(2026, 1, 5, 5, 0, tzinfo=timezone(timedelta(hours=-5))),
        expected=SchedulePlan(
            create="myctp-20260105100000",
            scheduled_for=at(10),
            delete=(),
            next_run=at(11),
            last_backup="myctp-20260105100000",
            last_successful_backup=None,
        ),
    ),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.reason)
def test_plan_decides_what_a_schedule_does_now(case: PlanCase) -> None:
    decided = plan(
        schedule="myctp",
        cron=HOURLY,
        ttl=TTL,
        suspend=case.suspend,
        now=case.now,
        created_at=case.created_at,
        last_schedule_time=case.last_schedule_time,
        backups=case.backups,
    )
    assert decided == case.expected


def test_expires_at_is_completion_plus_ttl_when_both_are_known() -> None:
    assert scheduled(8).expires_at == at(10, 5)
    assert replace(scheduled(8), completed_at=None).expires_at is None
    assert replace(scheduled(8), ttl=None).expires_at is None


@dataclass
class NameCase:
    reason: str
    schedule: str
    at: datetime
    expected: str


LONG_48 = "a" * 48
LONG_49 = "team-a-" + "x" * 42
NAME_CASES = [
    NameCase(
        reason="a short schedule name is followed by the UTC firing time",
        schedule="myctp",
        at=datetime(2026, 12, 2, 6, 0, tzinfo=UTC),
        expected="myctp-20261202060000",
    ),
    NameCase(
        reason="the firing time is written in UTC whatever its offset",
        schedule="myctp",
        at=datetime(2026, 12, 2, 7, 0, 9, tzinfo=timezone(timedelta(hours=1))),
        expected="myctp-20261202060009",
    ),
    NameCase(
        reason="a name of exactly 63 characters is kept whole",
        schedule=LONG_48,
        at=datetime(2026, 12, 2, 6, 0, tzinfo=UTC),
        expected=f"{LONG_48}-20261202060000",
    ),
    NameCase(
        reason="one character over 63 cuts the schedule and adds its digest",
        schedule=LONG_49,
        at=datetime(2026, 12, 2, 6, 0, tzinfo=UTC),
        expected="team-a-" + "x" * 32 + "-166a9b1e-20261202060000",
    ),
    NameCase(
        reason="a cut ending in a hyphen drops it",
        schedule="a" * 38 + "-" + "b" * 30,
        at=datetime(2026, 12, 2, 6, 0, tzinfo=UTC),
        expected="a" * 38 + "-784293ce-20261202060000",
    ),
    NameCase(
        reason="a cut ending in a dot drops it",
        schedule="a" * 38 + "." + "b" * 30,
        at=datetime(2026, 12, 2, 6, 0, tzinfo=UTC),
        expected="a" * 38 + "-8eda91b1-20261202060000",
    ),
]


@pytest.mark.parametrize("case", NAME_CASES, ids=lambda c: c.reason)
def test_backup_name_is_the_schedule_and_the_utc_firing_time(case: NameCase) -> None:
    name = backup_name(case.schedule, case.at)
    assert name == case.expected
    assert len(name) <= 63
    assert DNS_SUBDOMAIN.fullmatch(name)


def test_backup_names_at_the_limit_stay_distinct_per_schedule_and_per_time() -> None:
    first, second = "p" * 60 + "-one", "p" * 60 + "-two"
    times = [datetime(2026, 12, 2, 6, 0, tzinfo=UTC) + timedelta(minutes=n) for n in range(3)]
    names = {backup_name(schedule, moment) for schedule in (first, second) for moment in times}
    assert len(names) == 6
    assert all(len(name) <= 63 and DNS_SUBDOMAIN.fullmatch(name) for name in names)


def test_backup_name_refuses_a_naive_time() -> None:
    with pytest.raises(ValueError, match="at must be timezone-aware"):
        backup_name("myctp", datetime(2026, 12, 2, 6, 0))


@dataclass
class TtlCase:
    reason: str
    text: str
    expected: timedelta


TTL_CASES = [
    TtlCase(reason="hours", text="168h", expected=timedelta(days=7)),
    TtlCase(reason="minutes", text="90m", expected=timedelta(minutes=90)),
    TtlCase(reason="hours and minutes add up", text="1h30m", expected=timedelta(minutes=90)),
    TtlCase(
        reason="every unit in one",
        text="1h1m1s1ms1us1ns",
        expected=timedelta(hours=1, minutes=1, seconds=1, milliseconds=1, microseconds=1),
    ),
    TtlCase(reason="a fraction of an hour", text="1.5h", expected=timedelta(minutes=90)),
    TtlCase(reason="a fraction with no whole part", text=".5h", expected=timedelta(minutes=30)),
    TtlCase(reason="a whole part with a bare point", text="2.h", expected=timedelta(hours=2)),
    TtlCase(reason="the micro sign", text="5\u00b5s", expected=timedelta(microseconds=5)),
    TtlCase(reason="the Greek mu", text="5\u03bcs", expected=timedelta(microseconds=5)),
    TtlCase(reason="a plus sign", text="+2h", expected=timedelta(hours=2)),
    TtlCase(reason="a bare zero", text="0", expected=timedelta(0)),
    TtlCase(reason="a negative zero is zero", text="-0s", expected=timedelta(0)),
    TtlCase(
        reason="nanoseconds round to microseconds",
        text="1500ns",
        expected=timedelta(microseconds=2),
    ),
]


@pytest.mark.parametrize("case", TTL_CASES, ids=lambda c: c.reason)
def test_parse_ttl_reads_go_durations(case: TtlCase) -> None:
    assert parse_ttl(case.text) == case.expected


@dataclass
class TtlErrorCase:
    reason: str
    text: str
    message: str


TTL_ERROR_CASES = [
    TtlErrorCase(
        reason="an empty text",
        text="",
        message="ttl must be a Go duration such as 168h, 90m or 1h30m (got '')",
    ),
    TtlErrorCase(
        reason="a number without a unit",
        text="30",
        message="ttl must be a Go duration such as 168h, 90m or 1h30m (got '30')",
    ),
    TtlErrorCase(
        reason="days are not a Go unit",
        text="7d",
        message="ttl must be a Go duration such as 168h, 90m or 1h30m (got '7d')",
    ),
    TtlErrorCase(
        reason="units are lowercase",
        text="1H",
        message="ttl must be a Go duration such as 168h, 90m or 1h30m (got '1H')",
    ),
    TtlErrorCase(
        reason="no spaces between parts",
        text="1h 30m",
        message="ttl must be a Go duration such as 168h, 90m or 1h30m (got '1h 30m')",
    ),
    TtlErrorCase(
        reason="a unit without a number",
        text="h",
        message="ttl must be a Go duration such as 168h, 90m or 1h30m (got 'h')",
    ),
    TtlErrorCase(
        reason="a point alone is no number",
        text=".h",
        message="ttl must be a Go duration such as 168h, 90m or 1h30m (got '.h')",
    ),
    TtlErrorCase(
        reason="a negative duration",
        text="-1h",
        message="ttl must not be negative (got '-1h')",
    ),
]


@pytest.mark.parametrize("case", TTL_ERROR_CASES, ids=lambda c: c.reason)
def test_parse_ttl_rejects_what_go_rejects_and_negatives(case: TtlErrorCase) -> None:
    with pytest.raises(ValueError) as error:
        parse_ttl(case.text)
    assert str(error.value) == case.message


def test_a_schedule_run_minute_by_minute_for_two_days_makes_one_backup_per_firing() -> None:
    cron = Cron.parse("*/30 * * * *")
    ttl = timedelta(hours=2)
    created_at = datetime(2026, 3, 30, 22, 17, 23, tzinfo=UTC)
    alive: dict[str, BackupRecord] = {}
    made: list[BackupRecord] = []
    failing: set[str] = set()
    last_schedule_time: datetime | None = None
    most_alive = 0
    minutes = 2 * 24 * 60
    for step in range(minutes + 1):
        now = created_at + timedelta(minutes=step)
        # A Backup finishes three minutes after its firing; every fourth one fails.
        for name, backup in list(alive.items()):
            assert backup.scheduled_for is not None
            if backup.phase == "Pending" and now - backup.scheduled_for >= timedelta(minutes=3):
                phase = "Failed" if name in failing else "Completed"
                alive[name] = replace(backup, phase=phase, completed_at=now)
        decided = plan(
            schedule="myctp",
            cron=cron,
            ttl=ttl,
            suspend=False,
            now=now,
            created_at=created_at,
            last_schedule_time=last_schedule_time,
            backups=list(alive.values()),
        )
        for name in decided.delete:
            expires_at = alive.pop(name).expires_at
            assert expires_at is not None
            assert expires_at <= now
        if decided.create is not None:
            assert decided.scheduled_for is not None
            assert now - decided.scheduled_for < timedelta(minutes=1)
            assert decided.create not in alive
            backup = BackupRecord(decided.create, decided.scheduled_for, "Pending", None, ttl)
            alive[decided.create] = backup
            made.append(backup)
            if len(made) % 4 == 0:
                failing.add(decided.create)
            # Every third time the status write is lost, as if the controller crashed
            # right after creating: the next plans must find the Backup by its name.
            if len(made) % 3:
                last_schedule_time = decided.scheduled_for
        assert all(b.expires_at is None or b.expires_at > now for b in alive.values())
        most_alive = max(most_alive, len(alive))

    end = created_at + timedelta(minutes=minutes)
    firings = [
        moment
        for moment in (
            created_at.replace(second=0) + timedelta(minutes=n) for n in range(minutes + 1)
        )
        if created_at < moment <= end and moment.minute % 30 == 0
    ]
    assert len(firings) == 96
    assert [b.scheduled_for for b in made] == firings
    assert [b.name for b in made] == [backup_name("myctp", moment) for moment in firings]
    assert len({b.name for b in made}) == len(made)
    assert most_alive <= 5
