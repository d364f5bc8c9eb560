"""Reading observed objects: a path or a condition that is not there is None or Unknown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from google.protobuf import struct_pb2

from function import structs
from function.observed import Condition, Resource, condition, dig


@dataclass(frozen=True)
class ReadCase:
    reason: str
    body: dict[str, Any]
    path: tuple[str, ...]
    value: Any
    ready: Condition


READY = Condition("Ready", "True", "Available", "")
UNKNOWN = Condition("Ready")

READ_CASES = [
    ReadCase(
        "a value at the end of the path is read",
        {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]}},
        ("status", "conditions"),
        [{"type": "Ready", "status": "True", "reason": "Available"}],
        READY,
    ),
    ReadCase(
        "a missing step gives None and no condition is Unknown",
        {"spec": {}},
        ("status", "conditions"),
        None,
        UNKNOWN,
    ),
    ReadCase(
        "a step through a string gives None",
        {"status": "broken"},
        ("status", "conditions"),
        None,
        UNKNOWN,
    ),
    ReadCase(
        "a step through a list gives None",
        {"status": [1, 2]},
        ("status", "conditions"),
        None,
        UNKNOWN,
    ),
    ReadCase(
        "conditions that are not a list are no condition",
        {"status": {"conditions": 3}},
        ("status", "conditions"),
        3,
        UNKNOWN,
    ),
    ReadCase(
        "items that are not objects are skipped",
        {"status": {"conditions": ["Ready", None, {"type": "Ready", "status": True}]}},
        ("status", "conditions", "type"),
        None,
        Condition("Ready", "True"),
    ),
    ReadCase(
        "a type that is not a string is not the type asked for",
        {"status": {"conditions": [{"type": 1, "status": "True"}, {"type": "Ready"}]}},
        ("status", "conditions", "type"),
        None,
        Condition("Ready", "Unknown"),
    ),
    ReadCase(
        "the first condition of the type counts",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Ready"}]}},
        ("status", "absent"),
        None,
        Condition("Ready", "False"),
    ),
    ReadCase(
        "an empty string is read as it is, not as the default",
        {"status": {"conditions": [{"type": "Ready", "status": "", "message": "x"}]}},
        ("status", "conditions", "type"),
        None,
        Condition("Ready", "", "", "x"),
    ),
    ReadCase(
        "a step through null gives None",
        {"status": None},
        ("status", "conditions"),
        None,
        UNKNOWN,
    ),
    ReadCase(
        "no path gives the object itself",
        {"spec": {"a": "b"}},
        (),
        {"spec": {"a": "b"}},
        UNKNOWN,
    ),
    ReadCase(
        "only the condition of the type asked for counts",
        {"status": {"conditions": [{"type": "Synced", "status": "True"}]}},
        ("status",),
        {"conditions": [{"type": "Synced", "status": "True"}]},
        UNKNOWN,
    ),
]


@pytest.mark.parametrize("case", READ_CASES, ids=lambda case: case.reason)
@pytest.mark.parametrize("view", ["dict", "protobuf struct view"])
def test_reads_of_observed_objects_agree_for_dicts_and_struct_views(
    case: ReadCase, view: str
) -> None:
    body: Any = case.body
    struct = struct_pb2.Struct()
    if view != "dict":
        structs.fill(struct, case.body)
        body = structs.StructView(struct)
    unread = struct.SerializeToString(deterministic=True)
    got = dig(body, *case.path)
    got = _plain(got)
    assert got == _numbers_as_read(case.value, as_struct=view != "dict"), case.reason
    assert condition(body, "Ready") == case.ready, case.reason
    # A Resource finds its conditions in one walk, and reads Ready alike.
    assert Resource(body).ready == case.ready, case.reason
    # A view steps through what is not an object as through protobuf's empty
    # default; reading one must not write it into the request.
    assert struct.SerializeToString(deterministic=True) == unread, case.reason


def _plain(value: Any) -> Any:
    if isinstance(value, structs.StructView):
        return {key: _plain(value[key]) for key in value}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _numbers_as_read(value: Any, *, as_struct: bool) -> Any:
    if as_struct and type(value) is int:
        return float(value)
    if isinstance(value, dict):
        return {k: _numbers_as_read(v, as_struct=as_struct) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_as_read(v, as_struct=as_struct) for v in value]
    return value


@dataclass(frozen=True)
class FailureReadCase:
    reason: str
    conditions: list[Any]
    want: Condition | None


FAILURE_READ_CASES = [
    FailureReadCase(
        "Synced=False is read beside Ready, in the one walk",
        [
            {"type": "Ready", "status": "True", "reason": "Available"},
            {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": "boom"},
        ],
        Condition("Synced", "False", "ReconcileError", "boom"),
    ),
    FailureReadCase(
        "the first condition of a type counts, as for Ready",
        [
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
            {"type": "Synced", "status": "False", "reason": "ReconcileError"},
        ],
        None,
    ),
    FailureReadCase(
        "Synced comes before a LastAsyncOperation failure, whatever their order in the list",
        [
            {"type": "LastAsyncOperation", "status": "False", "reason": "AsyncUpdateFailure"},
            {"type": "Synced", "status": "False", "reason": "ReconcileError"},
        ],
        Condition("Synced", "False", "ReconcileError"),
    ),
    FailureReadCase(
        "a type that is not a string, or an item that is not an object, is skipped",
        [{"type": 1, "status": "False"}, "Synced", None],
        None,
    ),
    FailureReadCase(
        "Ready=False with a reason that is not a wait is a failure",
        [{"type": "Ready", "status": "False", "reason": "BuildFailed", "message": "x"}],
        Condition("Ready", "False", "BuildFailed", "x"),
    ),
    FailureReadCase(
        "Ready=False Creating is a wait",
        [{"type": "Ready", "status": "False", "reason": "Creating"}],
        None,
    ),
]


@pytest.mark.parametrize("case", FAILURE_READ_CASES, ids=lambda case: case.reason)
@pytest.mark.parametrize("view", ["dict", "protobuf struct view"])
def test_a_resources_failure_reads_alike_from_dicts_and_struct_views(
    case: FailureReadCase, view: str
) -> None:
    body: Any = {"status": {"conditions": case.conditions}}
    if view != "dict":
        struct = struct_pb2.Struct()
        structs.fill(struct, body)
        body = structs.StructView(struct)
    assert Resource(body).failure() == case.want, case.reason
