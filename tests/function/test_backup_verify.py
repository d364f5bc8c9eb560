"""spec.backup.verify: a composite's restore drills, read and passed on to its BackupSchedule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from function import model


@pytest.mark.parametrize(
    ("verify", "rendered", "reason"),
    [
        (None, None, "no verify asks for no drills, and the schedule has no field"),
        ({"interval": "168h"}, {"interval": "168h"}, "an interval alone is passed on"),
        (
            {"interval": "24h", "deadline": "45m"},
            {"interval": "24h", "deadline": "45m"},
            "an interval and a deadline are passed on as written",
        ),
    ],
)
def test_a_composites_verify_is_passed_on_to_its_backup_schedule(
    verify: dict[str, str] | None, rendered: dict[str, str] | None, reason: str
) -> None:
    backup = model.Backup.model_validate({} if verify is None else {"verify": verify})

    found = backup.verify.model_dump(exclude_none=True) if backup.verify is not None else None

    assert found == rendered, reason


@pytest.mark.parametrize(
    ("verify", "field", "reason"),
    [
        (
            {"interval": "30m"},
            "interval",
            "an interval under an hour is refused, as the schedule would",
        ),
        ({"interval": "daily"}, "interval", "an interval that is no duration is refused"),
        ({}, "interval", "a verify without an interval is refused"),
        ({"interval": "24h", "every": "1h"}, "every", "an unknown field is refused"),
    ],
)
def test_a_bad_verify_is_refused_naming_the_field(
    verify: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        model.Backup.model_validate({"verify": verify})

    assert any(field in map(str, error["loc"]) for error in raised.value.errors()), reason
