"""Times as the Kubernetes API writes them (``metav1.Time``): RFC 3339, UTC, to the second."""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_timestamp(moment: datetime) -> str:
    """``moment`` as the API server writes a time, ``2026-12-04T02:30:00Z``."""
    return moment.astimezone(UTC).strftime(_FORMAT)


def parse_timestamp(value: object) -> datetime | None:
    """A time read from an object; None when absent or not RFC 3339.

    The API server checks the format of the fields it types as times; only an
    annotation or a hand-edited status gets here malformed, and reads as unset.
    A time without a zone is taken as UTC, as the API server writes every time.
    """
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
