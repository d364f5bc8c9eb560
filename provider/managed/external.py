"""The small interface between the generic reconciler and a backend, as crossplane-runtime's.

A ``Connector`` turns a managed resource into an ``ExternalClient`` with the
credentials its provider config names; the client observes, creates, updates
and deletes the one external resource. Observe may write the managed
resource's ``status.atProvider`` in the dict it is given; it proposes
late-initialised spec fields, which the reconciler merges only when the
management policies allow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from provider.managed.conditions import Condition

ManagedObject = dict[str, Any]


@dataclass(frozen=True)
class Observation:
    """What Observe found."""

    exists: bool
    up_to_date: bool = False
    late_init: Mapping[str, Any] = field(default_factory=dict)
    ready: Condition | None = None
    connection_details: Mapping[str, bytes] = field(default_factory=dict)
    # The backend refuses the external resource as it is (its own controller says so):
    # Synced=False with this message, though the reconcile goes on to late-initialise
    # and update, since a corrected spec is how it is cured.
    refused: str = ""


@dataclass(frozen=True)
class Creation:
    """What Create returned."""

    connection_details: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Update:
    """What Update returned."""

    connection_details: Mapping[str, bytes] = field(default_factory=dict)


class ExternalClient(Protocol):
    """Talks to one backend on behalf of one managed resource."""

    async def observe(self, managed: ManagedObject) -> Observation:
        """Observe the external resource; may update ``managed``'s status and spec."""
        ...

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the external resource."""
        ...

    async def update(self, managed: ManagedObject) -> Update:
        """Bring the external resource to ``managed``'s spec."""
        ...

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the external resource (it may already be gone)."""
        ...


class Connector(Protocol):
    """Produces an ExternalClient with the credentials of the resource's provider config."""

    async def connect(self, managed: ManagedObject) -> ExternalClient:
        """Connect to the backend for ``managed``."""
        ...
