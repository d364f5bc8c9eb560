"""What ``controlplane-backup ls`` shows (pure): entries from Backups and archives, in order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provider.backup.cli.listing import (
    Entry,
    document,
    from_backup,
    from_object,
    newest_first,
    table,
)
from provider.backup.storage.s3 import StoredObject

AT = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)


def entry(name: str, time: datetime | None) -> Entry:
    return Entry(name, "", time, "", None, None, "")


@dataclass(frozen=True)
class OrderCase:
    reason: str
    given: list[Entry]
    want: list[str]


ORDER_CASES = [
    OrderCase(
        "Newer before older, whatever their names.",
        [entry("a", AT), entry("b", AT + timedelta(hours=1)), entry("c", AT - timedelta(days=1))],
        ["b", "a", "c"],
    ),
    OrderCase(
        "A Backup not finished yet (no time) comes first.",
        [entry("done", AT), entry("running", None)],
        ["running", "done"],
    ),
    OrderCase(
        "Equal times (S3 keeps whole seconds) fall back to the name, so the order is stable.",
        [entry("x-1", AT), entry("x-2", AT)],
        ["x-2", "x-1"],
    ),
]


@pytest.mark.parametrize("case", ORDER_CASES, ids=lambda case: case.reason)
def test_entries_are_listed_newest_first(case: OrderCase) -> None:
    assert [found.name for found in newest_first(case.given)] == case.want


@dataclass(frozen=True)
class BackupCase:
    reason: str
    backup: dict[str, Any]
    want: Entry


BACKUP_CASES = [
    BackupCase(
        "A Completed Backup shows its archive, size, objects and sha256 from its status.",
        {
            "metadata": {"name": "myctp-1", "creationTimestamp": "2026-12-04T05:00:00Z"},
            "spec": {"instanceRef": {"name": "myctp"}},
            "status": {
                "phase": "Completed",
                "completedAt": "2026-12-04T06:00:00Z",
                "location": {"bucket": "b", "key": "team-a/myctp/myctp-1.tar.gz"},
                "size": 1234,
                "objects": 56,
                "sha256": "ab" * 32,
            },
        },
        Entry(
            "myctp-1",
            "s3://b/team-a/myctp/myctp-1.tar.gz",
            AT,
            "Completed",
            1234,
            56,
            "myctp",
            sha256="ab" * 32,
        ),
    ),
    BackupCase(
        "A Backup without status yet is Pending, timed by its creation, with no archive.",
        {
            "metadata": {"name": "myctp-2", "creationTimestamp": "2026-12-04T06:00:00Z"},
            "spec": {"instanceRef": {"name": "myctp"}},
        },
        Entry("myctp-2", "", AT, "Pending", None, None, "myctp"),
    ),
]


@pytest.mark.parametrize("case", BACKUP_CASES, ids=lambda case: case.reason)
def test_a_backup_is_shown_as_its_status_says(case: BackupCase) -> None:
    assert from_backup(case.backup) == case.want


def test_an_archive_in_s3_is_named_by_its_file_without_the_suffix() -> None:
    stored = StoredObject("team-a/myctp/myctp-20261204060000.tar.gz", 99, AT)
    assert from_object("b", stored) == Entry(
        "myctp-20261204060000",
        "s3://b/team-a/myctp/myctp-20261204060000.tar.gz",
        AT,
        "",
        99,
        None,
        "",
    )


def test_json_gives_null_for_what_is_unknown_and_the_table_a_dash() -> None:
    """The source versions show where the archive records them, as nothing where not."""
    found = [
        Entry(
            "ok",
            "s3://b/k.tar.gz",
            AT,
            "",
            9,
            3,
            "team-a/x",
            kubernetes="v1.31.0",
            crossplane="2.1.4-up.2",
            verified=True,
        ),
        Entry("bad", "s3://b/bad.tar.gz", AT, "", 5, None, "", verified=False, problem="truncated"),
    ]
    assert document(found)[1] == {
        "name": "bad",
        "location": "s3://b/bad.tar.gz",
        "time": "2026-12-04T06:00:00Z",
        "phase": None,
        "size": 5,
        "objects": None,
        "instance": None,
        "sha256": None,
        "kubernetesVersion": None,
        "crossplaneVersion": None,
        "verified": False,
        "problem": "truncated",
    }
    header, first, second = table(found).splitlines()
    assert header.split()[-1] == "VERIFIED"
    assert first.split() == [
        "ok",
        "2026-12-04T06:00:00Z",
        "-",
        "9",
        "3",
        "team-a/x",
        "k8s=v1.31.0,xp=2.1.4-up.2",
        "s3://b/k.tar.gz",
        "yes",
    ]
    assert document(found)[0]["crossplaneVersion"] == "2.1.4-up.2"
    assert second.split()[-4:] == ["-", "s3://b/bad.tar.gz", "no:", "truncated"]


@dataclass(frozen=True)
class HostileCell:
    reason: str
    entry: Entry
    shown: str  # what the table must show in place of the team's text


HOSTILE_CELLS = [
    HostileCell(
        "An escape sequence in a Backup's instanceRef.name reaches the terminal as text.",
        Entry("b", "", AT, "Completed", 1, 1, "x\x1b]0;pwned\x07\x1b[2J"),
        "x\\x1b]0;pwned\\x07\\x1b[2J",
    ),
    HostileCell(
        "A newline cannot forge a row of its own.",
        Entry("b", "", AT, "Completed", 1, 1, "x\nfake  2026-01-01T00:00:00Z  Completed"),
        "x\\x0afake",
    ),
    HostileCell(
        "A bidirectional override cannot reorder what the operator reads.",
        Entry("b\u202egpj.exe", "", AT, "Completed", 1, 1, "i"),
        "b\\u202egpj.exe",
    ),
    HostileCell(
        "A backslash is escaped, so an escape shown was one in the value.",
        Entry("b", "s3://b/k\\x1b.tar.gz", AT, "", 1, None, ""),
        "s3://b/k\\x5cx1b.tar.gz",
    ),
    HostileCell(
        "A problem read from an archive is escaped too.",
        Entry("b", "s3://b/k.tar.gz", AT, "", 1, None, "", verified=False, problem="bad\rname"),
        "no: bad\\x0dname",
    ),
]


@pytest.mark.parametrize("case", HOSTILE_CELLS, ids=lambda case: case.reason)
def test_every_cell_of_the_table_is_escaped(case: HostileCell) -> None:
    shown = table([case.entry])
    assert case.shown in shown
    lines = shown.splitlines()
    assert len(lines) == 2, "one header and one row"
    assert all(char.isprintable() for line in lines for char in line)
