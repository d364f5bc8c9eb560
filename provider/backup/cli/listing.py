"""What ``controlplane-backup ls`` shows (pure): Backups or archives, newest first.

An entry comes from a Backup (its status says where its archive is, how big,
how many objects) or from an object under an S3 prefix (its key, size and
time); ``--verify`` adds what reading the archive found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provider.backup.storage.s3 import StoredObject
from provider.runtime.timestamps import format_timestamp, parse_timestamp

_NEVER = datetime.min.replace(tzinfo=UTC)
ARCHIVE_SUFFIX = ".tar.gz"


@dataclass(frozen=True)
class Entry:
    """One backup: a Backup object, or an archive found in S3."""

    name: str
    # s3://bucket/key; empty for a Backup that wrote no archive.
    location: str
    # When it finished (a Backup) or was written (an archive); None: not yet.
    time: datetime | None
    # A Backup's phase; empty for an archive found in S3.
    phase: str
    size: int | None
    objects: int | None
    # The Instance it was taken of, as the Backup or the archive names it.
    instance: str
    # The archive's sha256, as the Backup recorded it.
    sha256: str = ""
    # The source's versions, where export.yaml records them (archives of before do not).
    kubernetes: str = ""
    crossplane: str = ""
    # None: not checked (no --verify, or no archive); then True or False.
    verified: bool | None = None
    # Why it does not verify.
    problem: str = ""


def from_backup(backup: Mapping[str, Any]) -> Entry:
    """An entry for a Backup, from its spec and status."""
    metadata = backup.get("metadata") or {}
    status = backup.get("status") or {}
    location = status.get("location") or {}
    where = (
        f"s3://{location['bucket']}/{location['key']}"
        if location.get("bucket") and location.get("key")
        else ""
    )
    return Entry(
        name=str(metadata.get("name") or ""),
        location=where,
        time=parse_timestamp(status.get("completedAt"))
        or parse_timestamp(metadata.get("creationTimestamp")),
        phase=str(status.get("phase") or "Pending"),
        size=_count(status.get("size")),
        objects=_count(status.get("objects")),
        instance=str(((backup.get("spec") or {}).get("instanceRef") or {}).get("name") or ""),
        sha256=str(status.get("sha256") or ""),
    )


def from_object(bucket: str, stored: StoredObject) -> Entry:
    """An entry for an archive found under a prefix: what the listing tells."""
    base = stored.key.rsplit("/", 1)[-1]
    return Entry(
        name=base.removesuffix(ARCHIVE_SUFFIX),
        location=f"s3://{bucket}/{stored.key}",
        time=stored.last_modified.astimezone(UTC),
        phase="",
        size=stored.size,
        objects=None,
        instance="",
    )


def newest_first(entries: Iterable[Entry]) -> list[Entry]:
    """Newest first; those not finished yet (no time) on top, then by name."""
    return sorted(
        entries,
        key=lambda entry: (entry.time is None, entry.time or _NEVER, entry.name),
        reverse=True,
    )


def document(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """The entries as ``-o json`` prints them; absent values are null."""
    return [
        {
            "name": entry.name,
            "location": entry.location or None,
            "time": _format(entry.time),
            "phase": entry.phase or None,
            "size": entry.size,
            "objects": entry.objects,
            "instance": entry.instance or None,
            "sha256": entry.sha256 or None,
            "kubernetesVersion": entry.kubernetes or None,
            "crossplaneVersion": entry.crossplane or None,
            "verified": entry.verified,
            "problem": entry.problem or None,
        }
        for entry in entries
    ]


def table(entries: Sequence[Entry]) -> str:
    """The entries as columns, a header first; ``-`` where a value is unknown."""
    # VERIFIED last: a reason it does not verify is free text.
    header = (
        "NAME",
        "TIME",
        "PHASE",
        "SIZE",
        "OBJECTS",
        "INSTANCE",
        "VERSIONS",
        "LOCATION",
        "VERIFIED",
    )
    rows = [header] + [
        (
            entry.name,
            _format(entry.time) or "-",
            entry.phase or "-",
            "-" if entry.size is None else str(entry.size),
            "-" if entry.objects is None else str(entry.objects),
            entry.instance or "-",
            _versions(entry),
            entry.location or "-",
            _verdict(entry),
        )
        for entry in entries
    ]
    shown = [tuple(_escaped(cell) for cell in row) for row in rows]
    widths = [max(len(row[column]) for row in shown) for column in range(len(header))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in shown
    )


def _escaped(cell: str) -> str:
    """The cell with every character a terminal would act on written as an escape.

    Names, locations and problems come from what teams write (a Backup's
    ``spec.instanceRef.name``, an archive's key): a control character, an
    escape sequence or a bidirectional override must reach the operator's
    terminal as text, never as a command. A backslash is escaped too, so an
    escape shown was one in the value.
    """
    return "".join(char if char.isprintable() and char != "\\" else _escape(char) for char in cell)


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _versions(entry: Entry) -> str:
    """``k8s=<version>,xp=<version>``, what is known of it; ``-`` for nothing."""
    known = [
        f"{label}={version}"
        for label, version in (("k8s", entry.kubernetes), ("xp", entry.crossplane))
        if version
    ]
    return ",".join(known) or "-"


def _verdict(entry: Entry) -> str:
    if entry.verified is None:
        return "-"
    return "yes" if entry.verified else f"no: {entry.problem}"


def _format(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
