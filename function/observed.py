"""Read-only views of what Crossplane observed: the composite and composed resources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    found = item_where(obj, ("status", "conditions"), "type", type_)
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


class Resource:
    """One observed composed resource and its connection details."""

    # A plain class with slots, not a frozen dataclass: one is made for every
    # observed resource of every request, and a frozen dataclass's __init__
    # costs three times as much.
    __slots__ = ("body", "connection_details", "ready")

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
