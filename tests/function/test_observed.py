"""Reading observed objects: a path or a condition that is not there is None or Unknown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from google.protobuf import struct_pb2

from function import structs
from function.observed import Condition, condition, dig


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
