"""Read-only views of what Crossplane observed: the composite and composed resources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The conditions by which a composed object says that it failed, read in this
# order; each counts when its status is the one given:
# - Synced False: crossplane-runtime's managed reconciler could not reconcile it,
#   in the provider's words (upjet's "connect failed: ... ProviderConfig ... not
#   found", "create failed: async create failed: ... AccessDenied ...", our
#   provider's "the Space refused the ControlPlane: ...");
# - LastAsyncOperation False: upjet's asynchronous create, update or delete failed;
# - LastBackup False: a BackupSchedule's newest Backup failed.
# (Flux's Stalled=True comes with a Ready=False of the same reason and message.)
LAST_BACKUP = "LastBackup"
FAILURE_CONDITIONS = (
    ("Synced", "False"),
    ("LastAsyncOperation", "False"),
    (LAST_BACKUP, "False"),
)
# A condition with one of these reasons is on its way, or held on purpose, not
# failed: crossplane-runtime's Creating and Deleting, and its Synced=False
# ReconcilePaused (someone paused it: the crossplane.io/paused annotation or its
# management policies); Flux's Progressing and DependencyNotReady. Any other
# Ready=False (Flux's GitOperationFailed, BuildFailed, HealthCheckFailed, ...) failed.
WAITING_REASONS = frozenset(
    {"Creating", "Deleting", "ReconcilePaused", "Progressing", "DependencyNotReady"}
)
# What a Resource reads of its conditions, in one walk, when asked whether it failed.
_FAILURE_TYPES = frozenset(type_ for type_, _ in FAILURE_CONDITIONS)
_CONDITIONS = ("status", "conditions")


@dataclass(frozen=True)
class Condition:
    """A Kubernetes status condition, as a person reads it."""

    type: str
    status: str = "Unknown"
    reason: str = ""
    message: str = ""

    @property
    def true(self) -> bool:
        """Whether the condition holds."""
        return self.status == "True"


# dig and condition run for every composed resource of every request. Every
# mapping has get() and no other JSON value does, so asking for get() stands in
# for an isinstance check against the Mapping ABC, which costs more.


def dig(obj: Mapping[str, Any], *path: str) -> Any:
    """Return the value at ``path`` in nested mappings, or None where any step is missing."""
    # A view of a protobuf Struct walks its own fields, without a view per step.
    walk = getattr(obj, "dig", None)
    if walk is not None:
        return walk(*path)
    value: Any = obj
    for key in path:
        get = getattr(value, "get", None)
        if get is None:
            return None
        value = get(key)
    return value


def condition(obj: Mapping[str, Any], type_: str) -> Condition:
    """Return the object's condition of ``type_``; Unknown when it has none."""
    return _condition(type_, item_where(obj, _CONDITIONS, "type", type_))


def conditions_by_type(
    obj: Mapping[str, Any], types: frozenset[str]
) -> dict[str, Mapping[str, Any]]:
    """The object's conditions of ``types``, unread, by type: one walk of its conditions."""
    # A view of a protobuf Struct finds them in its own fields, wrapping only those found.
    find = getattr(obj, "items_by", None)
    if find is not None:
        found: dict[str, Mapping[str, Any]] = find(_CONDITIONS, "type", types)
        return found
    items = dig(obj, *_CONDITIONS)
    by_type: dict[str, Mapping[str, Any]] = {}
    for item in items if isinstance(items, list) else ():
        get = getattr(item, "get", None)
        type_ = get("type") if get is not None else None
        if type_ in types and type_ not in by_type:
            by_type[type_] = item
    return by_type


def _status(found: Mapping[str, Any]) -> str:
    """The status of one of an object's conditions (one call into upb for a view)."""
    text = getattr(found, "text", None)
    return text("status", "Unknown") if text is not None else str(found.get("status", "Unknown"))


def _condition(type_: str, found: Mapping[str, Any] | None) -> Condition:
    """The condition ``found`` (one of an object's conditions) as a Condition; Unknown if None."""
    if found is None:
        return Condition(type=type_)
    # A view of a protobuf Struct reads each text with one call into upb.
    text = getattr(found, "text", None)
    if text is None:
        get = found.get
        return Condition(
            type_, str(get("status", "Unknown")), str(get("reason", "")), str(get("message", ""))
        )
    return Condition(type_, text("status", "Unknown"), text("reason", ""), text("message", ""))


def item_where(
    obj: Mapping[str, Any], path: tuple[str, ...], key: str, wanted: str
) -> Mapping[str, Any] | None:
    """The first mapping in the list at ``path`` whose ``key`` is ``wanted``, or None."""
    # A view of a protobuf Struct finds it in its own fields, wrapping only the item found.
    find = getattr(obj, "item_where", None)
    if find is not None:
        found: Mapping[str, Any] | None = find(path, key, wanted)
        return found
    items = dig(obj, *path)
    if not isinstance(items, list):
        return None
    for item in items:
        get = getattr(item, "get", None)
        if get is not None and get(key) == wanted:
            return item  # type: ignore[no-any-return]
    return None


# A Resource's failure before it is read (None means "read: no failure").
_UNREAD = Condition("")


class Resource:
    """One observed composed resource and its connection details."""

    # A plain class with slots, not a frozen dataclass: one is made for every
    # observed resource of every request, and a frozen dataclass's __init__
    # costs three times as much.
    __slots__ = ("_failure", "body", "connection_details", "ready")

    def __init__(
        self, body: Mapping[str, Any], connection_details: Mapping[str, bytes] | None = None
    ) -> None:
        """Wrap ``body`` and read its Ready condition.

        Every composition asks every observed resource whether it is ready, so
        the condition is read here, once.
        """
        self.body = body
        self.connection_details: Mapping[str, bytes] = (
            {} if connection_details is None else connection_details
        )
        self.ready = condition(body, "Ready")
        self._failure: Condition | None = _UNREAD

    def failure(self) -> Condition | None:
        """The first condition by which the object says it failed; None when none does.

        ``FAILURE_CONDITIONS`` in their order, then Ready=False, each unless its
        reason is one of ``WAITING_REASONS``. Read when first asked, in one walk
        of the conditions and only the status of those found, then kept.
        """
        if self._failure is _UNREAD:
            self._failure = self._read_failure()
        return self._failure

    def _read_failure(self) -> Condition | None:
        found = conditions_by_type(self.body, _FAILURE_TYPES)
        for type_, failed in FAILURE_CONDITIONS:
            item = found.get(type_)
            if item is None or _status(item) != failed:
                continue
            said = _condition(type_, item)
            if said.reason not in WAITING_REASONS:
                return said
        ready = self.ready
        if ready.status == "False" and ready.reason not in WAITING_REASONS:
            return ready
        return None

    def get(self, *path: str) -> Any:
        """The value at ``path`` in its body, or None."""
        return dig(self.body, *path)


@dataclass(frozen=True)
class Observed:
    """The observed composite and its composed resources, by composition resource name.

    ``required``: the resources Crossplane fetched because an earlier answer
    asked for them, by requirement name; a requirement not fetched yet has no
    key, one that matched nothing an empty tuple.
    """

    composite: Mapping[str, Any]
    resources: Mapping[str, Resource] = field(default_factory=dict)
    required: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
