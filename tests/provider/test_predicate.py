"""Which watch events of its own kind wake the managed reconciler (pure, no servers).

Each write the provider makes to a composed object is a watch event Crossplane
core charges to its composite; a write that wakes its own writer again is a loop
that empties core's circuit breaker. These are the decisions that keep the
provider's own bookkeeping from waking it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from provider.controller import desired_state_changed
from provider.managed import meta


@dataclass(frozen=True)
class Case:
    reason: str
    old: dict[str, Any]
    new: dict[str, Any]
    wakes: bool


def obj(
    generation: int = 1,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    found: dict[str, Any] = {"metadata": {"generation": generation, **metadata}}
    if annotations is not None:
        found["metadata"]["annotations"] = annotations
    if status is not None:
        found["status"] = status
    return found


PENDING = {meta.EXTERNAL_CREATE_PENDING: "2026-12-04T20:00:00Z"}
FAILED = {**PENDING, meta.EXTERNAL_CREATE_FAILED: "2026-12-04T20:00:01Z"}
FAILED_AGAIN = {
    meta.EXTERNAL_CREATE_PENDING: "2026-12-04T20:00:05Z",
    meta.EXTERNAL_CREATE_FAILED: "2026-12-04T20:00:06Z",
}

CASES = [
    Case("a status write alone does not wake it", obj(), obj(status={"a": 1}), wakes=False),
    Case("a spec change (a new generation) wakes it", obj(), obj(generation=2), wakes=True),
    Case(
        "a team's annotation wakes it",
        obj(annotations={}),
        obj(annotations={"crossplane.io/paused": "true"}),
        wakes=True,
    ),
    Case(
        "the external name written wakes it (it is desired state)",
        obj(annotations={}),
        obj(annotations={meta.EXTERNAL_NAME: "bucket"}),
        wakes=True,
    ),
    Case(
        "the create-pending stamp written before a create does not wake it",
        obj(annotations={}),
        obj(annotations=PENDING),
        wakes=False,
    ),
    Case(
        "a failed create's stamp does not wake it: the retry waits for the queue's backoff",
        obj(annotations=PENDING),
        obj(annotations=FAILED),
        wakes=False,
    ),
    Case(
        "a create failing again, with new stamps, does not wake it",
        obj(annotations=FAILED),
        obj(annotations=FAILED_AGAIN),
        wakes=False,
    ),
    Case(
        "an operator removing create-pending (to release an interrupted create) wakes it",
        obj(annotations=PENDING),
        obj(annotations={}),
        wakes=True,
    ),
    Case(
        "a finalizer added wakes it",
        obj(),
        obj(finalizers=["finalizer.managedresource.crossplane.io"]),
        wakes=True,
    ),
    Case(
        "a deletion wakes it",
        obj(),
        obj(deletionTimestamp="2026-12-04T20:00:00Z"),
        wakes=True,
    ),
    Case("a label changed wakes it", obj(), obj(labels={"a": "b"}), wakes=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_only_a_change_of_desired_state_wakes_the_managed_reconciler(case: Case) -> None:
    assert desired_state_changed(case.old, case.new) is case.wakes, case.reason
