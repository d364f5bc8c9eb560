"""The progress of an export or restore: redrawn on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest

from provider.backup.cli.progress import Progress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def progress(terminal: bool, total: int | None = 1000) -> tuple[Progress, io.StringIO, Clock]:
    stream, clock = io.StringIO(), Clock()
    return Progress(stream, "restore", total, terminal=terminal, clock=clock), stream, clock


def test_off_a_terminal_it_writes_a_plain_line_every_interval_and_one_at_the_end() -> None:
    shown, stream, clock = progress(terminal=False)
    for second in range(1, 13):
        clock.now = float(second)
        shown.advance(50)
    shown.finish()

    lines = stream.getvalue().split("\n")
    assert lines[-1] == "", "every line ends with a newline"
    assert "\r" not in stream.getvalue()
    assert "\x1b" not in stream.getvalue()
    # At 1s (the first), 6s and 11s, then the end.
    assert lines[:-1] == [
        "restore: 50/1000 objects (5%), 50 objects/s, about 19s left",
        "restore: 300/1000 objects (30%), 50 objects/s, about 14s left",
        "restore: 550/1000 objects (55%), 50 objects/s, about 9s left",
        "restore: 600 objects, 50 objects/s, done in 12s",
    ]


def test_on_a_terminal_it_redraws_one_line_in_place_at_most_ten_times_a_second() -> None:
    shown, stream, clock = progress(terminal=True)
    for tick in range(1, 21):
        clock.now = tick * 0.025
        shown.advance(10)
    shown.finish()

    text = stream.getvalue()
    draws = text.split("\r\x1b[K")[1:]
    # 20 updates 25ms apart: drawn at 25, 125, 225, 325 and 425ms, then the final line.
    assert len(draws) == 6
    assert all("\n" not in draw for draw in draws[:-1])
    assert draws[-1] == "restore: 200 objects, 400 objects/s, done in 0s\n"


def test_clearing_on_a_terminal_erases_the_line_for_another_to_take_its_place() -> None:
    shown, stream, clock = progress(terminal=True)
    clock.now = 1.0
    shown.advance(1)
    shown.clear()
    shown.clear()

    assert stream.getvalue().endswith("left\r\x1b[K")


def test_an_estimated_total_below_the_count_grows_with_it() -> None:
    shown, stream, clock = progress(terminal=False, total=10)
    clock.now = 1.0
    shown.advance(15)

    assert stream.getvalue() == "restore: 15/15 objects (100%), 15 objects/s, about 0s left\n"


def test_without_a_total_it_shows_the_count_and_rate_only() -> None:
    shown, stream, clock = progress(terminal=False, total=None)
    clock.now = 2.0
    shown.advance(30)

    assert stream.getvalue() == "restore: 30 objects, 15 objects/s\n"


@dataclass
class DurationCase:
    reason: str
    seconds: float
    text: str


DURATION_CASES = [
    DurationCase("under a minute is seconds", 42.4, "42s"),
    DurationCase("minutes carry two-digit seconds", 185, "3m05s"),
    DurationCase("hours carry two-digit minutes", 3720, "1h02m"),
    DurationCase("a negative estimate is none", -3, "0s"),
]


@pytest.mark.parametrize("case", DURATION_CASES, ids=lambda c: c.reason)
def test_durations_are_short_and_rounded(case: DurationCase) -> None:
    assert duration(case.seconds) == case.text
