"""The annotations and finalizer crossplane-runtime keeps on every managed resource."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

FINALIZER = "finalizer.managedresource.crossplane.io"
EXTERNAL_NAME = "crossplane.io/external-name"
EXTERNAL_CREATE_PENDING = "crossplane.io/external-create-pending"
EXTERNAL_CREATE_SUCCEEDED = "crossplane.io/external-create-succeeded"
EXTERNAL_CREATE_FAILED = "crossplane.io/external-create-failed"
PAUSED = "crossplane.io/paused"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# A DNS-1123 label: what every backend accepts as a name.
_NAME_MAX = 63
_HASH_CHARS = 8
_NOT_LABEL_CHAR = re.compile(r"[^a-z0-9-]+")


def default_external_name(obj: Mapping[str, Any]) -> str:
    """``<namespace>-<name>-<hash>``: one name per namespaced object, stable, at most 63 characters.

    ``<namespace>-<name>`` alone is ambiguous (``team-a``/``prod`` and
    ``team``/``a-prod``); a hash of ``<namespace>/<name>`` (where ``/`` cannot be
    part of either) tells them apart. The readable head is cut to fit a DNS-1123
    label. A cluster-scoped object keeps its name.
    """
    metadata = obj["metadata"]
    namespace, name = metadata.get("namespace"), str(metadata["name"])
    if not namespace:
        return name
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:_HASH_CHARS]
    head = _NOT_LABEL_CHAR.sub("-", f"{namespace}-{name}".lower())
    head = head[: _NAME_MAX - _HASH_CHARS - 1].strip("-")
    return f"{head}-{digest}"


def legacy_external_name(obj: Mapping[str, Any]) -> str:
    """The default before it carried a hash: ``<namespace>-<name>``."""
    metadata = obj["metadata"]
    namespace = metadata.get("namespace")
    return f"{namespace}-{metadata['name']}" if namespace else str(metadata["name"])


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """The object's annotations (empty when it has none)."""
    metadata = obj.get("metadata") or {}
    result: Mapping[str, str] = metadata.get("annotations") or {}
    return result


def external_name(obj: Mapping[str, Any]) -> str:
    """The external name annotation, or an empty string."""
    return annotations_of(obj).get(EXTERNAL_NAME, "")


def is_paused(obj: Mapping[str, Any]) -> bool:
    """Whether the paused annotation is ``"true"``."""
    return annotations_of(obj).get(PAUSED) == "true"


def was_deleted(obj: Mapping[str, Any]) -> bool:
    """Whether the object is being deleted."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def timestamp(now: datetime | None = None) -> str:
    """A time in the format crossplane-runtime writes into the create annotations (UTC)."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime(_TIME_FORMAT)


def _time(obj: Mapping[str, Any], key: str) -> datetime | None:
    """An RFC 3339 annotation; anything else counts as unset, as crossplane-runtime reads it."""
    value = annotations_of(obj).get(key)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def create_incomplete(obj: Mapping[str, Any]) -> bool:
    """Whether a create was started and neither its success nor its failure was recorded.

    This is what guards against creating twice: a crash between the create
    call and recording its result leaves only the pending annotation.
    """
    pending = _time(obj, EXTERNAL_CREATE_PENDING)
    if pending is None:
        return False
    succeeded = _time(obj, EXTERNAL_CREATE_SUCCEEDED)
    failed = _time(obj, EXTERNAL_CREATE_FAILED)
    return all(t is None or pending > t for t in (succeeded, failed))


def create_grace_left(obj: Mapping[str, Any], seconds: float, now: datetime) -> float:
    """Seconds left of the grace period after a successful create (the backend may lag behind).

    0 when no create succeeded within the last ``seconds``; never more than
    ``seconds``, so a success stamped in the future by a skewed clock asks for no
    longer a wait at a time (it counts as within the period until the clock passes it).
    """
    succeeded = _time(obj, EXTERNAL_CREATE_SUCCEEDED)
    if succeeded is None:
        return 0.0
    return max(0.0, min(seconds, seconds - (now - succeeded).total_seconds()))
