"""Read-only views of what Crossplane observed: the composite and composed resources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
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


def dig(obj: Mapping[str, Any], *path: str) -> Any:
    """Return the value at ``path`` in nested mappings, or None where any step is missing."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def condition(obj: Mapping[str, Any], type_: str) -> Condition:
    """Return the object's condition of ``type_``; Unknown when it has none."""
    for item in dig(obj, "status", "conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == type_:
            return Condition(
                type=type_,
                status=str(item.get("status", "Unknown")),
                reason=str(item.get("reason", "")),
                message=str(item.get("message", "")),
            )
    return Condition(type=type_)


@dataclass(frozen=True)
class Resource:
    """One observed composed resource and its connection details."""

    body: Mapping[str, Any]
    connection_details: Mapping[str, bytes] = field(default_factory=dict)

    @cached_property
    def ready(self) -> Condition:
        """Its Ready condition."""
        return condition(self.body, "Ready")

    def get(self, *path: str) -> Any:
        """The value at ``path`` in its body, or None."""
        return dig(self.body, *path)


@dataclass(frozen=True)
class Observed:
    """The observed composite and its composed resources, by composition resource name."""

    composite: Mapping[str, Any]
    resources: Mapping[str, Resource] = field(default_factory=dict)
