"""Ready and Synced conditions with crossplane-runtime's types and reasons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

READY = "Ready"
SYNCED = "Synced"

AVAILABLE = "Available"
UNAVAILABLE = "Unavailable"
CREATING = "Creating"
DELETING = "Deleting"
RECONCILE_SUCCESS = "ReconcileSuccess"
RECONCILE_ERROR = "ReconcileError"
RECONCILE_PAUSED = "ReconcilePaused"


@dataclass(frozen=True)
class Condition:
    """A condition as crossplane-runtime writes it (the time is set when it is applied)."""

    type: str
    status: str
    reason: str
    message: str = ""


def available() -> Condition:
    """The external resource is ready for use."""
    return Condition(READY, "True", AVAILABLE)


def unavailable(message: str = "") -> Condition:
    """The external resource exists but is not ready for use."""
    return Condition(READY, "False", UNAVAILABLE, message)


def creating() -> Condition:
    """The external resource is being created."""
    return Condition(READY, "False", CREATING)


def deleting() -> Condition:
    """The external resource is being deleted."""
    return Condition(READY, "False", DELETING)


def reconcile_success() -> Condition:
    """The last reconcile succeeded."""
    return Condition(SYNCED, "True", RECONCILE_SUCCESS)


def reconcile_error(message: str) -> Condition:
    """The last reconcile failed; ``message`` says why (never a secret)."""
    return Condition(SYNCED, "False", RECONCILE_ERROR, message)


def reconcile_paused() -> Condition:
    """Reconciliation is paused by annotation or management policy."""
    return Condition(SYNCED, "False", RECONCILE_PAUSED)


def merged(
    current: Sequence[Mapping[str, Any]],
    updates: Sequence[Condition],
    generation: int,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """``current`` with ``updates`` applied, as crossplane-runtime's SetConditions does.

    A condition whose status, reason, message and observedGeneration are
    unchanged keeps its lastTransitionTime, so an unchanged resource gets an
    identical status and needs no write.
    """
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = [dict(item) for item in current]
    for update in updates:
        fresh: dict[str, Any] = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "lastTransitionTime": stamp,
            "observedGeneration": generation,
        }
        if update.message:
            fresh["message"] = update.message
        for index, existing in enumerate(result):
            if existing.get("type") != update.type:
                continue
            if _same(existing, fresh):
                break
            result[index] = fresh
            break
        else:
            result.append(fresh)
    return result


def _same(existing: Mapping[str, Any], fresh: Mapping[str, Any]) -> bool:
    """crossplane-runtime's Condition.Equal: a generation of 0 on either side is not compared."""
    generations = (existing.get("observedGeneration") or 0, fresh.get("observedGeneration") or 0)
    return (
        existing.get("status") == fresh.get("status")
        and existing.get("reason") == fresh.get("reason")
        and existing.get("message", "") == fresh.get("message", "")
        and (0 in generations or generations[0] == generations[1])
    )


def find(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_``, if any."""
    return next((c for c in conditions if c.get("type") == type_), None)
