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
    get = found.get
    return Condition(
        type=type_,
        status=str(get("status", "Unknown")),
        reason=str(get("reason", "")),
        message=str(get("message", "")),
    )


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


@dataclass(frozen=True)
class Resource:
    """One observed composed resource and its connection details."""

    body: Mapping[str, Any]
    connection_details: Mapping[str, bytes] = field(default_factory=dict)
    # Its Ready condition. Every composition asks it of every observed resource,
    # so it is read here, once, and not lazily: functools.cached_property takes
    # a lock on Python 3.11 (about 1.7 us on a first read).
    ready: Condition = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Read the Ready condition (the class is frozen, hence object.__setattr__)."""
        object.__setattr__(self, "ready", condition(self.body, "Ready"))

    def get(self, *path: str) -> Any:
        """The value at ``path`` in its body, or None."""
        return dig(self.body, *path)


@dataclass(frozen=True)
class Observed:
    """The observed composite and its composed resources, by composition resource name."""

    composite: Mapping[str, Any]
    resources: Mapping[str, Resource] = field(default_factory=dict)
