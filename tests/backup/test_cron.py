"""Cron expressions: parsing, the next firing, the latest firing, against a minute-by-minute scan.

The expected times are worked out by hand from a calendar (2026-01-01 is a
Thursday, 2028-02-29 a Tuesday, 2032-02-29 a Sunday); the property test
compares with a brute-force scan over an oracle built from the generated
fields, not from the code under test.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.backup.controllers.cron import Cron, CronError

MINUTE = timedelta(minutes=1)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@dataclass
class ParseErrorCase:
    reason: str
    expression: str
    message: str


PARSE_ERROR_CASES = [
    ParseErrorCase(
        reason="a minute past 59 is out of range",
        expression="61 * * * *",
        message="minute must be within 0-59 (got '61')",
    ),
    ParseErrorCase(
        reason="an hour past 23 is out of range",
        expression="0 24 * * *",
        message="hour must be within 0-23 (got '24')",
    ),
    ParseErrorCase(
        reason="day-of-month 0 is out of range",
        expression="0 0 0 * *",
        message="day-of-month must be within 1-31 (got '0')",
    ),
    ParseErrorCase(
        reason="month 13 is out of range and the rule mentions month names",
        expression="0 0 1 13 *",
        message="month must be within 1-12 or a name jan-dec (got '13')",
    ),
    ParseErrorCase(
        reason="day-of-week 8 is out of range though 7 is allowed",
        expression="0 0 * * 8",
        message="day-of-week must be within 0-7 or a name sun-sat (got '8')",
    ),
    ParseErrorCase(
        reason="an unknown month name is rejected",
        expression="0 0 1 foo *",
        message="month must be within 1-12 or a name jan-dec (got 'foo')",
    ),
    ParseErrorCase(
        reason="day names are not month names",
        expression="0 0 1 mon *",
        message="month must be within 1-12 or a name jan-dec (got 'mon')",
    ),
    ParseErrorCase(
        reason="full day names are not abbreviations",
        expression="0 0 * * monday",
        message="day-of-week must be within 0-7 or a name sun-sat (got 'monday')",
    ),
    ParseErrorCase(
        reason="a bad value inside a list is named alone",
        expression="1,61 * * * *",
        message="minute must be within 0-59 (got '61')",
    ),
    ParseErrorCase(
        reason="a bad end of a range is named alone",
        expression="0 0-25 * * *",
        message="hour must be within 0-23 (got '25')",
    ),
    ParseErrorCase(
        reason="a negative number is not a value",
        expression="-1 * * * *",
        message="minute must be *, a value or a range a-b, each with /step (got '-1')",
    ),
    ParseErrorCase(
        reason="a range of three bounds is malformed",
        expression="1-2-3 * * * *",
        message="minute must be *, a value or a range a-b, each with /step (got '1-2-3')",
    ),
    ParseErrorCase(
        reason="a question mark is Quartz syntax, not cron",
        expression="0 0 ? * *",
        message="day-of-month must be *, a value or a range a-b, each with /step (got '?')",
    ),
    ParseErrorCase(
        reason="a reversed range is rejected rather than wrapped",
        expression="30-10 * * * *",
        message="minute range must go upwards (got '30-10')",
    ),
    ParseErrorCase(
        reason="a step of zero would never advance",
        expression="*/0 * * * *",
        message="minute step must be a positive whole number (got '*/0')",
    ),
    ParseErrorCase(
        reason="a step must be a number",
        expression="*/x * * * *",
        message="minute step must be a positive whole number (got '*/x')",
    ),
    ParseErrorCase(
        reason="a step must be an ASCII number",
        expression="*/\u0665 * * * *",
        message="minute step must be a positive whole number (got '*/\u0665')",
    ),
    ParseErrorCase(
        reason="a single value takes no step, as in Vixie cron",
        expression="5/10 * * * *",
        message="minute step needs * or a range before it (got '5/10')",
    ),
    ParseErrorCase(
        reason="an empty list item is rejected",
        expression="1,,2 * * * *",
        message="minute has an empty list item (got '1,,2')",
    ),
    ParseErrorCase(
        reason="a trailing comma leaves an empty list item",
        expression="0 1, * * *",
        message="hour has an empty list item (got '1,')",
    ),
    ParseErrorCase(
        reason="four fields are too few",
        expression="0 0 * *",
        message=(
            "expression must have five fields (minute hour day-of-month month day-of-week)"
            " or be a macro (got 4 in '0 0 * *')"
        ),
    ),
    ParseErrorCase(
        reason="six fields (with seconds) are too many",
        expression="0 0 0 * * *",
        message=(
            "expression must have five fields (minute hour day-of-month month day-of-week)"
            " or be a macro (got 6 in '0 0 0 * * *')"
        ),
    ),
    ParseErrorCase(
        reason="an empty expression has no fields",
        expression="",
        message=(
            "expression must have five fields (minute hour day-of-month month day-of-week)"
            " or be a macro (got 0 in '')"
        ),
    ),
    ParseErrorCase(
        reason="@every under a minute never fires at minute resolution",
        expression="@every 30s",
        message="@every must be a whole number of minutes, at least 1m (got '30s')",
    ),
    ParseErrorCase(
        reason="@every of a minute and a half is not whole minutes",
        expression="@every 1m30s",
        message="@every must be a whole number of minutes, at least 1m (got '1m30s')",
    ),
    ParseErrorCase(
        reason="@every needs a Go duration, with its unit",
        expression="@every 6",
        message=(
            "@every needs a duration such as 30m or 6h: missing unit in '6': a duration is a "
            "number and a unit (ns, us, ms, s, m, h)"
        ),
    ),
    ParseErrorCase(
        reason="an unknown macro lists the known ones",
        expression="@yearly",
        message=(
            "macro must be one of @hourly, @daily, @midnight, @weekly, @monthly or @every "
            "(got '@yearly')"
        ),
    ),
    ParseErrorCase(
        reason="the 31st of February never fires",
        expression="0 0 31 2 *",
        message="day-of-month '31' never occurs in month '2', so the expression never fires",
    ),
    ParseErrorCase(
        reason="the 31st of the 30-day months never fires",
        expression="0 0 31 apr,jun,sep,nov *",
        message=(
            "day-of-month '31' never occurs in month 'apr,jun,sep,nov',"
            " so the expression never fires"
        ),
    ),
    ParseErrorCase(
        reason="a starred day-of-week still requires the day of the month to exist",
        expression="0 0 30 feb */2",
        message="day-of-month '30' never occurs in month 'feb', so the expression never fires",
    ),
]


@pytest.mark.parametrize("case", PARSE_ERROR_CASES, ids=lambda c: c.reason)
def test_parse_rejects_malformed_expressions_naming_the_field_and_rule(
    case: ParseErrorCase,
) -> None:
    with pytest.raises(CronError) as error:
        Cron.parse(case.expression)
    assert str(error.value) == case.message


def test_a_cron_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="minute must be within 0-59"):
        Cron.parse("60 * * * *")


def test_constructing_a_cron_directly_parses_it_too() -> None:
    with pytest.raises(CronError, match="hour must be within 0-23"):
        Cron("0 99 * * *")


@dataclass
class NextCase:
    reason: str
    expression: str
    after: datetime
    expected: datetime


NEXT_CASES = [
    NextCase(
        reason="@every 6h fires at the multiples of six hours since the epoch: 00, 06, 12, 18 UTC",
        expression="@every 6h",
        after=utc(2026, 12, 3, 7, 5),
        expected=utc(2026, 12, 3, 12, 0),
    ),
    NextCase(
        reason="@every fires strictly after a moment that is itself a firing",
        expression="@every 6h",
        after=utc(2026, 12, 3, 12, 0),
        expected=utc(2026, 12, 3, 18, 0),
    ),
    NextCase(
        reason="@every 1m fires in the next minute",
        expression="@every 1m",
        after=utc(2026, 12, 3, 7, 5, 30),
        expected=utc(2026, 12, 3, 7, 6),
    ),
    NextCase(
        # 2026-12-03T00:00Z is 29,937,600 minutes after the epoch, which 7 divides: the
        # firings that day are at 00:00, 00:07, ...; 10:00 is 600 minutes in, and 86 * 7 = 602.
        reason="@every 7m, which divides no hour, counts from the epoch and not from the hour",
        expression="@every 7m",
        after=utc(2026, 12, 3, 10, 0),
        expected=utc(2026, 12, 3, 10, 2),
    ),
    NextCase(
        reason="every minute fires in the minute after a whole minute",
        expression="* * * * *",
        after=utc(2026, 3, 1, 10, 0),
        expected=utc(2026, 3, 1, 10, 1),
    ),
    NextCase(
        reason="seconds are dropped, and the result is strictly later",
        expression="* * * * *",
        after=utc(2026, 3, 1, 10, 0, 59),
        expected=utc(2026, 3, 1, 10, 1),
    ),
    NextCase(
        reason="a firing exactly at the moment is not the next one",
        expression="0 10 * * *",
        after=utc(2026, 3, 1, 10, 0),
        expected=utc(2026, 3, 2, 10, 0),
    ),
    NextCase(
        reason="a step of minutes rolls over into the next hour",
        expression="*/15 * * * *",
        after=utc(2026, 3, 1, 10, 59),
        expected=utc(2026, 3, 1, 11, 0),
    ),
    NextCase(
        reason="a stepped range of hours rolls over into the next day",
        expression="5,35 8-18/5 * * *",
        after=utc(2026, 1, 1, 18, 36),
        expected=utc(2026, 1, 2, 8, 5),
    ),
    NextCase(
        reason="the next value in a list in the same hour",
        expression="5,35 8-18/5 * * *",
        after=utc(2026, 1, 1, 13, 5),
        expected=utc(2026, 1, 1, 13, 35),
    ),
    NextCase(
        reason="daily at midnight crosses the end of January",
        expression="0 0 * * *",
        after=utc(2026, 1, 31, 12, 0),
        expected=utc(2026, 2, 1),
    ),
    NextCase(
        reason="the day after 28 February 2026 is 1 March",
        expression="0 0 * * *",
        after=utc(2026, 2, 28, 1, 0),
        expected=utc(2026, 3, 1),
    ),
    NextCase(
        reason="the day after 28 February 2028 is the leap day",
        expression="0 0 * * *",
        after=utc(2028, 2, 28, 1, 0),
        expected=utc(2028, 2, 29),
    ),
    NextCase(
        reason="the last minute of the year fires a year later",
        expression="59 23 31 12 *",
        after=utc(2026, 12, 31, 23, 59),
        expected=utc(2027, 12, 31, 23, 59),
    ),
    NextCase(
        reason="new year's day crosses the end of the year",
        expression="0 0 1 1 *",
        after=utc(2026, 6, 1),
        expected=utc(2027, 1, 1),
    ),
    NextCase(
        reason="the 31st skips the months that have 30 days",
        expression="0 0 31 * *",
        after=utc(2026, 4, 1),
        expected=utc(2026, 5, 31),
    ),
    NextCase(
        reason="the leap day waits for the next leap year",
        expression="0 12 29 2 *",
        after=utc(2025, 3, 1),
        expected=utc(2028, 2, 29, 12, 0),
    ),
    NextCase(
        reason="2100 is not a leap year, so the leap day waits eight years",
        expression="0 0 29 2 *",
        after=utc(2096, 3, 1),
        expected=utc(2104, 2, 29),
    ),
    NextCase(
        reason="both day fields restricted: a Friday that is not the 13th matches",
        expression="0 0 13 * fri",
        after=utc(2026, 1, 1),
        expected=utc(2026, 1, 2),
    ),
    NextCase(
        reason="both day fields restricted: a 13th that is not a Friday matches",
        expression="0 0 13 * fri",
        after=utc(2026, 1, 12),
        expected=utc(2026, 1, 13),
    ),
    NextCase(
        reason="both day fields restricted: the 31st of February is rescued by Mondays",
        expression="0 0 31 2 mon",
        after=utc(2026, 1, 1),
        expected=utc(2026, 2, 2),
    ),
    NextCase(
        reason="a starred day-of-month with a step makes both day fields required",
        expression="0 0 */2 * mon",
        after=utc(2026, 1, 1),
        expected=utc(2026, 1, 5),
    ),
    NextCase(
        reason="a starred day-of-week with a step makes both day fields required",
        expression="0 0 29 2 */7",
        after=utc(2026, 1, 1),
        expected=utc(2032, 2, 29),
    ),
    NextCase(
        reason="an unrestricted day-of-week leaves only the day of the month",
        expression="0 0 15 * *",
        after=utc(2026, 1, 15, 0, 0),
        expected=utc(2026, 2, 15),
    ),
    NextCase(
        reason="an unrestricted day-of-month leaves only the day of the week",
        expression="0 9 * feb mon",
        after=utc(2026, 1, 1),
        expected=utc(2026, 2, 2, 9, 0),
    ),
    NextCase(
        reason="names are case-insensitive",
        expression="0 9 * FEB Mon",
        after=utc(2026, 1, 1),
        expected=utc(2026, 2, 2, 9, 0),
    ),
    NextCase(
        reason="a range of month names",
        expression="0 0 1 oct-dec *",
        after=utc(2026, 3, 1),
        expected=utc(2026, 10, 1),
    ),
    NextCase(
        reason="day-of-week 7 is Sunday",
        expression="0 0 * * 7",
        after=utc(2026, 1, 1),
        expected=utc(2026, 1, 4),
    ),
    NextCase(
        reason="day-of-week 0 is Sunday",
        expression="0 0 * * 0",
        after=utc(2026, 1, 1),
        expected=utc(2026, 1, 4),
    ),
    NextCase(
        reason="a range ending at 7 reaches Sunday",
        expression="0 0 * * 5-7",
        after=utc(2026, 1, 3, 12, 0),
        expected=utc(2026, 1, 4),
    ),
    NextCase(
        reason="a range of day names skips the weekend",
        expression="30 6 * * mon-fri",
        after=utc(2026, 1, 2, 7, 0),
        expected=utc(2026, 1, 5, 6, 30),
    ),
    NextCase(
        reason="extra whitespace between fields is allowed",
        expression="  0   0 * *  * ",
        after=utc(2026, 1, 1, 5, 0),
        expected=utc(2026, 1, 2),
    ),
    NextCase(
        reason="@hourly fires at the top of the next hour",
        expression="@hourly",
        after=utc(2026, 1, 1, 10, 0),
        expected=utc(2026, 1, 1, 11, 0),
    ),
    NextCase(
        reason="@daily fires at the next midnight",
        expression="@daily",
        after=utc(2026, 1, 1, 10, 0),
        expected=utc(2026, 1, 2),
    ),
    NextCase(
        reason="@midnight is @daily",
        expression="@midnight",
        after=utc(2026, 12, 31, 0, 0),
        expected=utc(2027, 1, 1),
    ),
    NextCase(
        reason="@weekly fires at midnight on Sunday",
        expression="@weekly",
        after=utc(2026, 1, 1),
        expected=utc(2026, 1, 4),
    ),
    NextCase(
        reason="@monthly fires at midnight on the first",
        expression="@monthly",
        after=utc(2026, 1, 31, 23, 59),
        expected=utc(2026, 2, 1),
    ),
    NextCase(
        reason="a moment in another offset is read as the UTC instant it is",
        expression="0 0 * * *",
        after=datetime(2026, 1, 1, 1, 30, tzinfo=timezone(timedelta(hours=2))),
        expected=utc(2026, 1, 1),
    ),
    NextCase(
        reason="UTC has no daylight saving: 02:30 exists on Berlin's spring-forward day",
        expression="30 2 * * *",
        after=datetime(2026, 3, 29, 1, 0, tzinfo=ZoneInfo("Europe/Berlin")),
        expected=utc(2026, 3, 29, 2, 30),
    ),
    NextCase(
        reason="UTC has no daylight saving: Berlin's repeated hour is one UTC hour",
        expression="0 * * * *",
        after=datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Berlin")),
        expected=utc(2026, 10, 25, 2, 0),
    ),
]


@pytest.mark.parametrize("case", NEXT_CASES, ids=lambda c: c.reason)
def test_next_after_finds_the_first_firing_strictly_later(case: NextCase) -> None:
    found = Cron.parse(case.expression).next_after(case.after)
    assert found == case.expected
    assert found.utcoffset() == timedelta(0)


def test_next_after_skips_whole_years_rather_than_scanning_minutes() -> None:
    # A Sunday leap day comes once in 28 years: a minute scan would take millions of steps.
    cron = Cron.parse("0 0 29 2 */7")
    started = time.perf_counter()
    assert cron.next_after(utc(2032, 2, 29)) == utc(2060, 2, 29)
    assert time.perf_counter() - started < 0.5


@dataclass
class LatestCase:
    reason: str
    expression: str
    moment: datetime
    not_before: datetime
    expected: datetime | None


LATEST_CASES = [
    LatestCase(
        reason="@every's latest firing is the last multiple at or before the moment",
        expression="@every 6h",
        moment=utc(2026, 12, 3, 7, 5),
        not_before=utc(2026, 12, 3, 0, 0),
        expected=utc(2026, 12, 3, 6, 0),
    ),
    LatestCase(
        reason="@every has no firing in a window shorter than its interval that misses one",
        expression="@every 6h",
        moment=utc(2026, 12, 3, 7, 5),
        not_before=utc(2026, 12, 3, 6, 0),
        expected=None,
    ),
    LatestCase(
        reason="a firing exactly at the moment counts",
        expression="0 * * * *",
        moment=utc(2026, 1, 5, 10, 0),
        not_before=utc(2026, 1, 5, 9, 0),
        expected=utc(2026, 1, 5, 10, 0),
    ),
    LatestCase(
        reason="a firing exactly at not_before does not count",
        expression="0 * * * *",
        moment=utc(2026, 1, 5, 10, 59),
        not_before=utc(2026, 1, 5, 10, 0),
        expected=None,
    ),
    LatestCase(
        reason="a firing seconds before not_before does not count",
        expression="0 * * * *",
        moment=utc(2026, 1, 5, 10, 59),
        not_before=utc(2026, 1, 5, 10, 0, 30),
        expected=None,
    ),
    LatestCase(
        reason="seconds past the moment's minute keep that minute's firing",
        expression="0 * * * *",
        moment=utc(2026, 1, 5, 10, 0, 59),
        not_before=utc(2026, 1, 5, 9, 59, 59),
        expected=utc(2026, 1, 5, 10, 0),
    ),
    LatestCase(
        reason="of several firings in the window the latest is chosen",
        expression="*/30 * * * *",
        moment=utc(2026, 1, 5, 12, 10),
        not_before=utc(2026, 1, 5, 6, 0),
        expected=utc(2026, 1, 5, 12, 0),
    ),
    LatestCase(
        reason="the previous value in a list of hours",
        expression="15 3,9,21 * * *",
        moment=utc(2026, 1, 5, 20, 0),
        not_before=utc(2026, 1, 1),
        expected=utc(2026, 1, 5, 9, 15),
    ),
    LatestCase(
        reason="back across the start of the year",
        expression="0 0 1 1 *",
        moment=utc(2026, 6, 1),
        not_before=utc(2020, 1, 1),
        expected=utc(2026, 1, 1),
    ),
    LatestCase(
        reason="back across the start of March to the leap day",
        expression="0 0 29 2 *",
        moment=utc(2031, 1, 1),
        not_before=utc(2020, 1, 1),
        expected=utc(2028, 2, 29),
    ),
    LatestCase(
        reason="back from March 2026 to the last day of February",
        expression="59 23 28-31 * *",
        moment=utc(2026, 3, 1, 12, 0),
        not_before=utc(2026, 1, 1),
        expected=utc(2026, 2, 28, 23, 59),
    ),
    LatestCase(
        reason="both day fields restricted: the latest of a Friday or a 13th",
        expression="0 0 13 * fri",
        moment=utc(2026, 2, 12),
        not_before=utc(2026, 2, 1),
        expected=utc(2026, 2, 6),
    ),
    LatestCase(
        reason="a macro fires within the window",
        expression="@weekly",
        moment=utc(2026, 1, 10),
        not_before=utc(2026, 1, 1),
        expected=utc(2026, 1, 4),
    ),
    LatestCase(
        reason="no firing in the window",
        expression="0 0 1 1 *",
        moment=utc(2026, 6, 1),
        not_before=utc(2026, 1, 1),
        expected=None,
    ),
    LatestCase(
        reason="a window that ends before it starts is empty",
        expression="* * * * *",
        moment=utc(2026, 1, 1),
        not_before=utc(2026, 1, 2),
        expected=None,
    ),
    LatestCase(
        reason="moments in other offsets are read as their UTC instants",
        expression="0 0 * * *",
        moment=datetime(2026, 1, 2, 0, 30, tzinfo=timezone(timedelta(hours=1))),
        not_before=datetime(2025, 12, 31, 22, 30, tzinfo=timezone(timedelta(hours=-1))),
        expected=utc(2026, 1, 1),
    ),
]


@pytest.mark.parametrize("case", LATEST_CASES, ids=lambda c: c.reason)
def test_latest_at_or_before_finds_the_most_recent_firing_in_the_window(
    case: LatestCase,
) -> None:
    found = Cron.parse(case.expression).latest_at_or_before(case.moment, case.not_before)
    assert found == case.expected
    assert found is None or found.utcoffset() == timedelta(0)


@dataclass
class NaiveCase:
    reason: str
    call: str
    message: str


NAIVE = datetime(2026, 1, 1)
AWARE = utc(2026, 1, 1)
NAIVE_CASES = [
    NaiveCase(
        reason="next_after refuses a naive moment",
        call="next_after",
        message="moment must be timezone-aware (got 2026-01-01T00:00:00)",
    ),
    NaiveCase(
        reason="latest_at_or_before refuses a naive moment",
        call="latest moment",
        message="moment must be timezone-aware (got 2026-01-01T00:00:00)",
    ),
    NaiveCase(
        reason="latest_at_or_before refuses a naive not_before",
        call="latest not_before",
        message="not_before must be timezone-aware (got 2026-01-01T00:00:00)",
    ),
]


@pytest.mark.parametrize("case", NAIVE_CASES, ids=lambda c: c.reason)
def test_times_must_be_timezone_aware(case: NaiveCase) -> None:
    cron = Cron.parse("* * * * *")
    with pytest.raises(ValueError) as error:
        if case.call == "next_after":
            cron.next_after(NAIVE)
        elif case.call == "latest moment":
            cron.latest_at_or_before(NAIVE, AWARE)
        else:
            cron.latest_at_or_before(AWARE, NAIVE)
    assert str(error.value) == case.message


# The property test: generated fields carry the values they select, worked out
# here with plain ranges, and a brute-force scan over those values is the oracle.

HORIZON = timedelta(days=3)


@dataclass(frozen=True)
class Generated:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    either_day: bool

    def fires_at(self, at: datetime) -> bool:
        in_month = at.day in self.days
        in_week = at.isoweekday() % 7 in self.weekdays
        day = (in_month or in_week) if self.either_day else (in_month and in_week)
        return (
            day
            and at.minute in self.minutes
            and at.hour in self.hours
            and (at.month in self.months)
        )

    def ever_fires(self) -> bool:
        # 2000 is a leap year: every day of the month that ever exists exists in it.
        return self.either_day or any(
            day <= calendar.monthrange(2000, month)[1] for month in self.months for day in self.days
        )


@st.composite
def cron_field(
    draw: st.DrawFn, low: int, high: int, names: tuple[str, ...] = ()
) -> tuple[str, frozenset[int]]:
    def render(value: int) -> str:
        index = value - low
        if index < len(names) and draw(st.booleans()):
            name = names[index]
            return name.upper() if draw(st.booleans()) else name
        return str(value)

    texts: list[str] = []
    values: set[int] = set()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        shape = draw(st.sampled_from(["*", "*/n", "a", "a-b", "a-b/n"]))
        a, b = sorted(draw(st.integers(low, high)) for _ in range(2))
        step = draw(st.integers(min_value=1, max_value=high - low + 1))
        if shape == "*":
            texts.append("*")
            values.update(range(low, high + 1))
        elif shape == "*/n":
            texts.append(f"*/{step}")
            values.update(range(low, high + 1, step))
        elif shape == "a":
            texts.append(render(a))
            values.add(a)
        elif shape == "a-b":
            texts.append(f"{render(a)}-{render(b)}")
            values.update(range(a, b + 1))
        else:
            texts.append(f"{render(a)}-{render(b)}/{step}")
            values.update(range(a, b + 1, step))
    return ",".join(texts), frozenset(values)


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@st.composite
def generated_cron(draw: st.DrawFn) -> Generated:
    minute = draw(cron_field(0, 59))
    hour = draw(cron_field(0, 23))
    day = draw(cron_field(1, 31))
    # Mostly every month, so that most expressions fire within the scanned days.
    month = draw(st.just(("*", frozenset(range(1, 13)))) | cron_field(1, 12, MONTHS))
    weekday = draw(cron_field(0, 7, DAYS))
    return Generated(
        expression=" ".join(text for text, _ in (minute, hour, day, month, weekday)),
        minutes=minute[1],
        hours=hour[1],
        days=day[1],
        months=month[1],
        weekdays=frozenset(value % 7 for value in weekday[1]),
        either_day=not day[0].startswith("*") and not weekday[0].startswith("*"),
    )


MOMENTS = st.builds(
    lambda naive, offset: naive.replace(tzinfo=timezone(timedelta(minutes=offset))),
    st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2110, 12, 31)),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)


def scan_forward(generated: Generated, moment: datetime) -> datetime | None:
    start = moment.astimezone(UTC).replace(second=0, microsecond=0)
    for step in range(1, int(HORIZON / MINUTE) + 1):
        at = start + step * MINUTE
        if generated.fires_at(at):
            return at
    return None


def scan_backward(generated: Generated, moment: datetime) -> datetime | None:
    start = moment.astimezone(UTC).replace(second=0, microsecond=0)
    for step in range(int(HORIZON / MINUTE)):
        at = start - step * MINUTE
        if at <= moment - HORIZON:
            return None
        if generated.fires_at(at):
            return at
    return None


@settings(max_examples=300, deadline=None)
@given(generated=generated_cron(), moment=MOMENTS)
def test_firing_times_agree_with_a_minute_by_minute_scan(
    generated: Generated, moment: datetime
) -> None:
    if not generated.ever_fires():
        with pytest.raises(CronError, match="never fires"):
            Cron.parse(generated.expression)
        return
    cron = Cron.parse(generated.expression)

    expected_next = scan_forward(generated, moment)
    found_next = cron.next_after(moment)
    if expected_next is None:
        assert found_next > moment + HORIZON
        assert generated.fires_at(found_next)
    else:
        assert found_next == expected_next

    expected_latest = scan_backward(generated, moment)
    assert cron.latest_at_or_before(moment, not_before=moment - HORIZON) == expected_latest
