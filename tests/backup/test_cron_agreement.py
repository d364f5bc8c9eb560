"""The function refuses exactly the schedules the Backup controller would refuse.

The two cannot import each other, so each has its own cron rules; this test
holds them together: a composite the function accepts must never make a
BackupSchedule the controller rejects, and the other way round.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from function.rules import check_cron
from provider.backup.controllers.cron import Cron, CronError

FIELD = st.one_of(
    st.just("*"),
    st.integers(0, 61).map(str),
    st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 31), st.integers(0, 31)),
    st.builds(lambda n: f"*/{n}", st.integers(0, 20)),
    st.builds(
        lambda a, b, n: f"{a}-{b}/{n}", st.integers(0, 12), st.integers(0, 31), st.integers(1, 9)
    ),
    st.builds(lambda a, n: f"{a}/{n}", st.integers(0, 12), st.integers(1, 9)),
    st.sampled_from(["jan", "feb", "mon", "sun", "1,15", "2-3,30-31", "x"]),
)
DURATION = st.lists(
    st.builds(
        lambda number, unit: f"{number}{unit}",
        st.one_of(st.integers(0, 400).map(str), st.sampled_from(["0.5", "1.5", "0.1", "2.25"])),
        st.sampled_from(["ms", "s", "m", "h"]),
    ),
    min_size=1,
    max_size=3,
).map("".join)
EXPRESSION = st.one_of(
    st.lists(FIELD, min_size=4, max_size=6).map(" ".join),
    DURATION.map(lambda duration: f"@every {duration}"),
    st.sampled_from(["@every", "@every ", "@every 6", "@every six hours", "@every -5m"]),
    st.sampled_from(["@hourly", "@daily", "@weekly", "0 0 31 2 *", "0 0 30 2 *", "0 0 29 2 *"]),
)


def function_accepts(expression: str) -> bool:
    try:
        check_cron(expression)
    except ValueError:
        return False
    return True


def controller_accepts(expression: str) -> bool:
    try:
        Cron.parse(expression)
    except CronError:
        return False
    return True


@settings(max_examples=2000, deadline=None)
@given(expression=EXPRESSION)
def test_the_function_and_the_controller_accept_the_same_schedules(expression: str) -> None:
    assert function_accepts(expression) == controller_accepts(expression), expression
