"""The fast Struct conversions agree with protobuf's own, for anything JSON can carry."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest
from crossplane.function import resource
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from function import structs

# Whole numbers beyond 2**53 lose digits in a double, in protobuf's own
# conversion as in ours; the composition never writes one.
SAFE_INTEGERS = st.integers(min_value=-(2**53), max_value=2**53)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | SAFE_INTEGERS
    | SAFE_INTEGERS.map(float)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)
OBJECTS = st.dictionaries(st.text(max_size=8), JSON, max_size=6)


def _as_read(value: Any) -> Any:
    """What a Struct gives back for ``value``: every number a float, tuples lists."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {key: _as_read(item) for key, item in value.items()}
    return [_as_read(item) for item in value]


@settings(max_examples=300, deadline=None)
@given(data=OBJECTS)
def test_fill_then_read_gives_back_what_protobufs_own_update_and_read_give(
    data: dict[str, Any],
) -> None:
    ours = struct_pb2.Struct()
    structs.fill(ours, data)
    theirs = struct_pb2.Struct()
    theirs.update(data)
    assert ours == theirs
    assert structs.to_dict(ours) == resource.struct_to_dict(theirs)
    assert _plain(structs.StructView(ours)) == structs.to_dict(ours)


@settings(max_examples=300, deadline=None)
@given(data=OBJECTS)
def test_what_fill_writes_reads_back_the_same_but_whole_numbers_as_floats(
    data: dict[str, Any],
) -> None:
    struct = struct_pb2.Struct()
    structs.fill(struct, data)
    assert structs.to_dict(struct) == _as_read(data)
    again = struct_pb2.Struct.FromString(struct.SerializeToString())
    assert structs.to_dict(again) == _as_read(data)


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_fill_value_writes_one_value_as_protobuf_would(value: Any) -> None:
    ours = struct_pb2.Value()
    structs.fill_value(ours, "stale")
    structs.fill_value(ours, value)
    theirs = struct_pb2.Struct()
    theirs.update({"v": value})
    assert ours == theirs.fields["v"]
    assert structs.to_python(ours) == _as_read(value)


FILL_CASES = [
    pytest.param({"a": {}}, id="an empty object is an empty struct, not null"),
    pytest.param({"a": []}, id="an empty list is an empty list, not null"),
    pytest.param({"a": [{}, [], None]}, id="empty objects and lists inside a list stay set"),
    pytest.param({"a": [[1, "x"], {"b": True}]}, id="lists and objects nest inside lists"),
    pytest.param({"ключ": "значение ✓", "": "😀"}, id="unicode keys and values, and an empty key"),
    pytest.param({"t": True, "f": False, "n": None, "z": 0}, id="false, null and zero are values"),
    pytest.param({"a": (1, 2)}, id="a tuple is a list"),
]


@pytest.mark.parametrize("data", FILL_CASES)
def test_fill_agrees_with_protobufs_own_update_on_edge_cases(data: dict[str, Any]) -> None:
    ours = struct_pb2.Struct()
    structs.fill(ours, data)
    theirs = struct_pb2.Struct()
    theirs.update(data)
    assert ours == theirs
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )
    assert structs.to_dict(ours) == _as_read(data)


def _plain(value: Any) -> Any:
    if isinstance(value, structs.StructView):
        return {key: _plain(value[key]) for key in value}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def test_fill_replaces_what_the_struct_held() -> None:
    struct = struct_pb2.Struct()
    structs.fill(struct, {"old": 1.0})
    structs.fill(struct, {"new": "x"})
    assert structs.to_dict(struct) == {"new": "x"}


def test_fill_takes_str_subclasses_as_strings() -> None:
    class Colour(StrEnum):
        RED = "red"

    struct = struct_pb2.Struct()
    structs.fill(struct, {"colour": Colour.RED})
    assert structs.to_dict(struct) == {"colour": "red"}


def test_fill_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(TypeError, match="cannot put a bytes in a protobuf Struct"):
        structs.fill(struct_pb2.Struct(), {"raw": b"\x00"})


def test_a_view_raises_key_error_for_a_missing_key() -> None:
    struct = struct_pb2.Struct()
    structs.fill(struct, {"a": {"b": 1}})
    view = structs.StructView(struct)
    assert view.get("missing") is None
    assert view["a"]["b"] == 1.0
    assert len(view) == 1
    with pytest.raises(KeyError):
        view["missing"]
