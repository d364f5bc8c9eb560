"""Times as the Kubernetes API writes them, read and written by every backup controller."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest

from provider.runtime.timestamps import format_timestamp, parse_timestamp


@dataclass
class ParseCase:
    reason: str
    value: object
    want: datetime | None


PARSE_CASES = [
    ParseCase(
        "The API server's own form reads as that moment in UTC.",
        "2026-12-04T02:30:00Z",
        datetime(2026, 12, 4, 2, 30, tzinfo=UTC),
    ),
    ParseCase(
        "An offset is kept, so the moment is the same however it was written.",
        "2026-12-04T03:30:00+01:00",
        datetime(2026, 12, 4, 2, 30, tzinfo=UTC),
    ),
    ParseCase(
        "A time without a zone is UTC, as the API server writes every time.",
        "2026-12-04T02:30:00",
        datetime(2026, 12, 4, 2, 30, tzinfo=UTC),
    ),
    ParseCase("An absent field is unset.", None, None),
    ParseCase("An empty string is unset.", "", None),
    ParseCase("A hand-edited value that is no time reads as unset, not an error.", "soon", None),
]


@pytest.mark.parametrize("case", PARSE_CASES, ids=lambda case: case.reason)
def test_a_time_read_from_an_object_is_a_zoned_moment_or_unset(case: ParseCase) -> None:
    assert parse_timestamp(case.value) == case.want, case.reason


def test_a_written_time_is_utc_to_the_second_and_reads_back_as_the_same_moment() -> None:
    moment = datetime(2026, 12, 4, 3, 30, 15, 999, tzinfo=timezone(timedelta(hours=1)))
    written = format_timestamp(moment)
    assert written == "2026-12-04T02:30:15Z"
    assert parse_timestamp(written) == moment.replace(microsecond=0)
