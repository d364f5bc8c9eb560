"""Ready and Synced conditions, against crossplane-runtime's ``apis/common`` conditions."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from provider.managed import conditions
from provider.managed.conditions import Condition

EARLIER = "2024-05-01T09:00:00Z"
NOW = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
NOW_STAMP = "2024-05-01T10:00:00Z"
GENERATION = 3


def stored(
    type_: str, status: str, reason: str, message: str = "", generation: int = GENERATION
) -> dict[str, Any]:
    """A condition as it sits in a status, written at EARLIER."""
    condition: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "lastTransitionTime": EARLIER,
        "observedGeneration": generation,
    }
    if message:
        condition["message"] = message
    return condition


SYNCED_OK = stored("Synced", "True", "ReconcileSuccess")
READY_OK = stored("Ready", "True", "Available")
CUSTOM = {"type": "Healthy", "status": "Unknown", "reason": "Probing", "extra": {"kept": True}}


@dataclass
class MergeCase:
    reason: str
    current: list[dict[str, Any]]
    updates: list[Condition]
    expected: list[dict[str, Any]]


MERGE_CASES = [
    MergeCase(
        reason="an unchanged condition keeps its last transition time",
        current=[SYNCED_OK],
        updates=[conditions.reconcile_success()],
        expected=[SYNCED_OK],
    ),
    MergeCase(
        reason="an unchanged condition with a message keeps its last transition time",
        current=[stored("Synced", "False", "ReconcileError", "connect failed: boom")],
        updates=[conditions.reconcile_error("connect failed: boom")],
        expected=[stored("Synced", "False", "ReconcileError", "connect failed: boom")],
    ),
    MergeCase(
        reason="a changed status replaces the condition and its time",
        current=[READY_OK],
        updates=[Condition("Ready", "False", "Available")],
        expected=[
            {
                "type": "Ready",
                "status": "False",
                "reason": "Available",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            }
        ],
    ),
    MergeCase(
        reason="a changed reason replaces the condition and its time",
        current=[READY_OK],
        updates=[conditions.unavailable()],
        expected=[
            {
                "type": "Ready",
                "status": "False",
                "reason": "Unavailable",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            }
        ],
    ),
    MergeCase(
        reason="a changed message replaces the condition and its time",
        current=[stored("Synced", "False", "ReconcileError", "connect failed: boom")],
        updates=[conditions.reconcile_error("connect failed: bang")],
        expected=[
            {
                "type": "Synced",
                "status": "False",
                "reason": "ReconcileError",
                "message": "connect failed: bang",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            }
        ],
    ),
    MergeCase(
        reason="a new generation replaces the condition and its time",
        current=[stored("Synced", "True", "ReconcileSuccess", generation=2)],
        updates=[conditions.reconcile_success()],
        expected=[
            {
                "type": "Synced",
                "status": "True",
                "reason": "ReconcileSuccess",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            }
        ],
    ),
    MergeCase(
        reason="a condition of a new type is appended after the existing ones",
        current=[READY_OK],
        updates=[conditions.reconcile_success()],
        expected=[
            READY_OK,
            {
                "type": "Synced",
                "status": "True",
                "reason": "ReconcileSuccess",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            },
        ],
    ),
    MergeCase(
        reason="conditions of other types are left untouched in place",
        current=[CUSTOM, SYNCED_OK, READY_OK],
        updates=[conditions.reconcile_error("boom")],
        expected=[
            CUSTOM,
            {
                "type": "Synced",
                "status": "False",
                "reason": "ReconcileError",
                "message": "boom",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            },
            READY_OK,
        ],
    ),
    MergeCase(
        reason="an empty message is left out of a new condition",
        current=[],
        updates=[conditions.unavailable("")],
        expected=[
            {
                "type": "Ready",
                "status": "False",
                "reason": "Unavailable",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            }
        ],
    ),
    MergeCase(
        reason="an old message is dropped when the condition is replaced by one without",
        current=[stored("Synced", "False", "ReconcileError", "boom")],
        updates=[conditions.reconcile_success()],
        expected=[
            {
                "type": "Synced",
                "status": "True",
                "reason": "ReconcileSuccess",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            }
        ],
    ),
    MergeCase(
        reason="several updates apply in one call and keep what did not change",
        current=[READY_OK, SYNCED_OK],
        updates=[conditions.available(), conditions.reconcile_error("boom")],
        expected=[
            READY_OK,
            {
                "type": "Synced",
                "status": "False",
                "reason": "ReconcileError",
                "message": "boom",
                "lastTransitionTime": NOW_STAMP,
                "observedGeneration": GENERATION,
            },
        ],
    ),
    MergeCase(
        reason="no updates leave the conditions as they were",
        current=[READY_OK, CUSTOM],
        updates=[],
        expected=[READY_OK, CUSTOM],
    ),
]


@pytest.mark.parametrize("case", MERGE_CASES, ids=lambda case: case.reason)
def test_merged_applies_updates_as_crossplane_runtime_set_conditions_does(case: MergeCase) -> None:
    current = copy.deepcopy(case.current)

    result = conditions.merged(current, case.updates, GENERATION, NOW)

    assert result == case.expected
    assert current == case.current, "merged must not modify the conditions it is given"


def test_merging_what_is_already_there_gives_an_identical_status_needing_no_write() -> None:
    first = conditions.merged(
        [], [conditions.available(), conditions.reconcile_success()], GENERATION, NOW
    )
    later = datetime(2024, 5, 1, 11, 0, 0, tzinfo=UTC)

    second = conditions.merged(
        first, [conditions.available(), conditions.reconcile_success()], GENERATION, later
    )

    assert second == first


@dataclass
class ConstructorCase:
    reason: str
    make: Callable[[], Condition]
    type: str
    status: str
    condition_reason: str
    message: str = ""


CONSTRUCTOR_CASES = [
    ConstructorCase(
        "available is Ready True Available", conditions.available, "Ready", "True", "Available"
    ),
    ConstructorCase(
        "unavailable is Ready False Unavailable",
        conditions.unavailable,
        "Ready",
        "False",
        "Unavailable",
    ),
    ConstructorCase(
        "unavailable carries its message",
        lambda: conditions.unavailable("not ready yet"),
        "Ready",
        "False",
        "Unavailable",
        "not ready yet",
    ),
    ConstructorCase(
        "creating is Ready False Creating", conditions.creating, "Ready", "False", "Creating"
    ),
    ConstructorCase(
        "deleting is Ready False Deleting", conditions.deleting, "Ready", "False", "Deleting"
    ),
    ConstructorCase(
        "reconcile success is Synced True ReconcileSuccess",
        conditions.reconcile_success,
        "Synced",
        "True",
        "ReconcileSuccess",
    ),
    ConstructorCase(
        "reconcile error is Synced False ReconcileError with the error as message",
        lambda: conditions.reconcile_error("observe failed: boom"),
        "Synced",
        "False",
        "ReconcileError",
        "observe failed: boom",
    ),
    ConstructorCase(
        "reconcile paused is Synced False ReconcilePaused",
        conditions.reconcile_paused,
        "Synced",
        "False",
        "ReconcilePaused",
    ),
]


@pytest.mark.parametrize("case", CONSTRUCTOR_CASES, ids=lambda case: case.reason)
def test_a_constructor_gives_crossplane_runtimes_type_status_and_reason(
    case: ConstructorCase,
) -> None:
    assert case.make() == Condition(case.type, case.status, case.condition_reason, case.message)


def test_find_returns_the_condition_of_a_type_or_none() -> None:
    current = [CUSTOM, READY_OK, SYNCED_OK]

    assert conditions.find(current, "Ready") == READY_OK
    assert conditions.find(current, "Synced") == SYNCED_OK
    assert conditions.find(current, "Missing") is None
