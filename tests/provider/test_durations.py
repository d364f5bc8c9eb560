"""Go's duration syntax, as ``time.ParseDuration`` reads it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.runtime.durations import format_go_duration, parse_go_duration


@dataclass
class Case:
    reason: str
    text: str
    want: float


CASES = [
    Case("Seconds.", "30s", 30.0),
    Case("Minutes.", "1m", 60.0),
    Case("Hours and minutes.", "1h30m", 5400.0),
    Case("Go's own example.", "2h45m", 9900.0),
    Case("A fraction of an hour.", "1.5h", 5400.0),
    Case("Milliseconds.", "300ms", 0.3),
    Case("Microseconds in ASCII.", "250us", 250e-6),
    Case("Microseconds with the micro sign.", "250\u00b5s", 250e-6),
    Case("Nanoseconds.", "5ns", 5e-9),
    Case("A leading dot.", ".5s", 0.5),
    Case("A trailing dot.", "5.s", 5.0),
    Case("Zero needs no unit.", "0", 0.0),
    Case("A sign.", "-1m", -60.0),
    Case("Units in any order, as Go allows.", "1s1m", 61.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_a_go_duration_parses_to_seconds(case: Case) -> None:
    assert parse_go_duration(case.text) == pytest.approx(case.want), case.reason


@dataclass
class BadCase:
    reason: str
    text: str
    want_in_message: str


BAD_CASES = [
    BadCase("A bare number has no unit.", "10", "missing unit"),
    BadCase("Days are not a Go unit.", "1d", "invalid duration"),
    BadCase("A unit alone is no duration.", "m", "invalid duration"),
    BadCase("Spaces are not allowed.", "1 m", "invalid duration"),
    BadCase("Nothing is no duration.", "", "invalid duration"),
    BadCase("Upper-case units are not Go's.", "1H", "invalid duration"),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda case: case.reason)
def test_anything_else_is_refused_with_the_reason(case: BadCase) -> None:
    with pytest.raises(ValueError, match=case.want_in_message):
        parse_go_duration(case.text)


@pytest.mark.parametrize(
    ("seconds", "want"),
    [(3600, "1h"), (90, "1m30s"), (1, "1s"), (5400, "1h30m"), (0.5, "0.5s")],
)
def test_whole_seconds_format_the_short_way(seconds: float, want: str) -> None:
    assert format_go_duration(seconds) == want
