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

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53).map(float)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)
OBJECTS = st.dictionaries(st.text(max_size=8), JSON, max_size=6)


@settings(max_examples=300)
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
