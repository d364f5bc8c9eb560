"""The operator's endpoint allow-list on both commands (issue 12, item 8)."""

from __future__ import annotations

from dataclasses import dataclass, field

import click
import pytest
from click.testing import CliRunner

from provider.cli import backup_main, main


@dataclass
class FlagCase:
    reason: str
    command: click.Command
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    FlagCase(
        "the backup controller refuses an entry that is not an origin",
        backup_main,
        ["--allowed-s3-endpoint", "ftp://s3.internal"],
    ),
    FlagCase(
        "the provider refuses one with a path",
        main,
        ["--allowed-s3-endpoint", "https://s3.internal/bucket"],
    ),
    FlagCase(
        "the environment variable is read the same way",
        backup_main,
        [],
        {"ALLOWED_S3_ENDPOINTS": "https://ok.internal s3.internal"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason)
def test_a_bad_allowed_endpoint_is_a_usage_error_before_anything_runs(case: FlagCase) -> None:
    result = CliRunner().invoke(case.command, case.args, env=case.env)

    assert result.exit_code == 2, result.output
    assert "--allowed-s3-endpoint" in result.output
    assert "must be https://host[:port]" in result.output
