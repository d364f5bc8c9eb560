"""Fast conversions between protobuf Structs and Python values, for the gRPC edge.

protobuf's own ``json_format`` walks every field in Python; a request carries
every observed resource whole, and the function reads a few fields of each.
``StructView`` converts only what is read; ``fill`` writes a dict in one pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from google.protobuf import struct_pb2


class StructView(Mapping[str, Any]):
    """A read-only mapping over a Struct that converts each value when it is read."""

    __slots__ = ("_fields",)

    def __init__(self, struct: struct_pb2.Struct) -> None:
        """Wrap ``struct`` without copying it."""
        self._fields = struct.fields

    def __getitem__(self, key: str) -> Any:
        """The value at ``key``: a StructView, a list or a scalar."""
        # get(), not [], on a protobuf map: [] would insert a missing key.
        value = self._fields.get(key)
        if value is None:
            raise KeyError(key)
        return _value(value, lazy=True)

    def get(self, key: str, default: Any = None) -> Any:
        """The value at ``key``, or ``default``; without Mapping's exception round trip."""
        value = self._fields.get(key)
        return default if value is None else _value(value, lazy=True)

    def __iter__(self) -> Iterator[str]:
        """The keys."""
        return iter(self._fields)

    def __len__(self) -> int:
        """The number of keys."""
        return len(self._fields)


def to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain dicts, lists and scalars (whole, not lazily)."""
    return {key: _value(value, lazy=False) for key, value in struct.fields.items()}


def _value(value: struct_pb2.Value, *, lazy: bool) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return StructView(value.struct_value) if lazy else to_dict(value.struct_value)
    if kind == "list_value":
        return [_value(item, lazy=lazy) for item in value.list_value.values]
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    return None


def fill(struct: struct_pb2.Struct, data: Mapping[str, Any]) -> None:
    """Write ``data`` into ``struct``, replacing what it held."""
    struct.Clear()
    _fill_struct(struct, data)


def _fill_struct(struct: struct_pb2.Struct, data: Mapping[str, Any]) -> None:
    fields = struct.fields
    for key, item in data.items():
        _fill_value(fields[key], item)


def _fill_value(target: struct_pb2.Value, item: Any) -> None:
    # Exact types first: this runs for every field of every desired object,
    # and an ABC isinstance check costs more than the assignment.
    kind = type(item)
    if kind is str:
        target.string_value = item
    elif kind is bool:
        target.bool_value = item
    elif kind is int or kind is float:
        target.number_value = item
    elif kind is dict or isinstance(item, Mapping):
        target.struct_value.SetInParent()
        _fill_struct(target.struct_value, item)
    elif kind is list or kind is tuple:
        values = target.list_value.values
        target.list_value.SetInParent()
        for element in item:
            _fill_value(values.add(), element)
    elif item is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(item, str):
        target.string_value = item
    elif isinstance(item, int | float):
        target.number_value = item
    else:
        msg = f"cannot put a {kind.__name__} in a protobuf Struct"
        raise TypeError(msg)
