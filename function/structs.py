"""Fast conversions between protobuf Structs and Python values, for the gRPC edge.

protobuf's own ``json_format`` and ``Struct.update`` walk every field in
Python, one call per value; a request carries every observed resource whole,
and the function reads a few fields of each. ``StructView`` converts only what
is read; ``fill`` writes a dict in one pass. Both dispatch on exact builtin
types first and keep the per-value work to one protobuf call where they can:
on the upb backend every value costs a call into C, and the Python around it
is what remains to save.
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
        return _lazy(value)

    def get(self, key: str, default: Any = None) -> Any:
        """The value at ``key``, or ``default``; without Mapping's exception round trip."""
        value = self._fields.get(key)
        return default if value is None else _lazy(value)

    def dig(self, *path: str) -> Any:
        """The value at ``path``, or None where a step is missing or not an object.

        One walk over the protobuf fields that wraps only the value it ends on,
        instead of a view per step: reads of observed objects run this for
        every composed resource of every request.
        """
        if not path:
            return self
        value = self._value_at(path)
        return None if value is None else _lazy(value)

    def item_where(self, path: tuple[str, ...], key: str, wanted: str) -> StructView | None:
        """The first object of the list at ``path`` whose ``key`` is the string ``wanted``.

        Skips what is not an object; None when there is no list or no such item.
        Only the item found is wrapped: this finds the Ready condition of every
        observed resource of every request.
        """
        value = self._value_at(path)
        if value is None:
            return None
        # A value that is not a list reads as an empty one, and an item that
        # is not an object as an empty object (see _value_at).
        for item in value.list_value.values:
            found = item.struct_value.fields.get(key)
            if (
                found is not None
                and found.string_value == wanted
                and found.WhichOneof("kind") == "string_value"
            ):
                return StructView(item.struct_value)
        return None

    def items_by(
        self, path: tuple[str, ...], key: str, wanted: frozenset[str]
    ) -> dict[str, StructView]:
        """Per string in ``wanted``, the first object of the list at ``path`` whose ``key`` is it.

        One walk of the list, for several wanted values: the conditions of every
        observed resource of every request (Ready, Synced, ...) are read so.
        """
        found: dict[str, StructView] = {}
        value = self._value_at(path)
        if value is None:
            return found
        for item in value.list_value.values:
            field = item.struct_value.fields.get(key)
            if field is None:
                continue
            name = field.string_value
            if name in wanted and name not in found and field.WhichOneof("kind") == "string_value":
                found[name] = StructView(item.struct_value)
        return found

    def text(self, key: str, default: str) -> str:
        """The string at ``key``; another value as ``str()`` of it; ``default`` when missing.

        Reads a condition's status, reason and message for every observed
        resource of every request: a non-empty string costs one call into upb.
        """
        value = self._fields.get(key)
        if value is None:
            return default
        text: str = value.string_value
        if text or value.WhichOneof("kind") == "string_value":
            return text
        return str(_lazy(value))

    def _value_at(self, path: tuple[str, ...]) -> struct_pb2.Value | None:
        # Reading the struct_value of a Value that holds something else gives
        # protobuf's empty default Struct, in which every key is missing: a
        # step through a string, a list or null ends in None as it should,
        # without asking each step's kind (a call into upb per step).
        if not path:
            return None
        value = self._fields.get(path[0])
        for key in path[1:]:
            if value is None:
                return None
            value = value.struct_value.fields.get(key)
        return value

    def __iter__(self) -> Iterator[str]:
        """The keys."""
        return iter(self._fields)

    def __len__(self) -> int:
        """The number of keys."""
        return len(self._fields)


def _lazy(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return StructView(value.struct_value)
    if kind == "list_value":
        return [_lazy(item) for item in value.list_value.values]
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        return value.number_value
    return None


def to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain dicts, lists and scalars (whole, not lazily)."""
    return _plain_fields(struct.fields)


def to_python(value: struct_pb2.Value) -> Any:
    """One Struct value as a plain dict, list or scalar (whole, not lazily)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return _plain_fields(value.struct_value.fields)
    if kind == "list_value":
        return [to_python(item) for item in value.list_value.values]
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        return value.number_value
    return None


def _plain_fields(fields: Any) -> dict[str, Any]:
    # Keys, then each value by key: a protobuf map's items() is the Mapping
    # mixin's, a Python generator that costs more than the lookups.
    return {key: to_python(fields[key]) for key in fields}


def fill(struct: struct_pb2.Struct, data: Mapping[str, Any]) -> None:
    """Write ``data`` into ``struct``, replacing what it held.

    Raises:
        TypeError: a value is not one JSON can carry.
    """
    struct.Clear()
    _fill_fields(struct.fields, data)


def fill_value(target: struct_pb2.Value, item: Any) -> None:
    """Write one JSON value into ``target``.

    Raises:
        TypeError: the value is not one JSON can carry.
    """
    target.Clear()
    _fill_value(target, item)


# The loops below inline the common cases (exact str, dict, bool, list,
# int and float) instead of calling _fill_value for each: they run once per
# field of every desired object, and a Python call costs more than the
# assignment it would make.


def _fill_fields(fields: Any, data: Mapping[str, Any]) -> None:
    for key, item in data.items():
        kind = type(item)
        if kind is str:
            fields[key].string_value = item
        elif kind is dict:
            if item:
                _fill_fields(fields[key].struct_value.fields, item)
            else:
                fields[key].struct_value.SetInParent()
        elif kind is bool:
            fields[key].bool_value = item
        elif kind is list:
            _fill_list(fields[key].list_value, item)
        elif kind is int or kind is float:
            fields[key].number_value = item
        else:
            _fill_value(fields[key], item)


def _fill_list(target: struct_pb2.ListValue, items: Any) -> None:
    if not items:
        target.SetInParent()
        return
    values = target.values
    for item in items:
        kind = type(item)
        if kind is str:
            values.add().string_value = item
        elif kind is dict and item:
            _fill_fields(values.add().struct_value.fields, item)
        else:
            _fill_value(values.add(), item)


def _fill_value(target: struct_pb2.Value, item: Any) -> None:
    """Any value JSON can carry, including subclasses of the builtin types."""
    if item is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(item, str):
        target.string_value = item
    elif isinstance(item, bool):
        target.bool_value = item
    elif isinstance(item, int | float):
        target.number_value = item
    elif isinstance(item, Mapping):
        target.struct_value.SetInParent()
        _fill_fields(target.struct_value.fields, item)
    elif isinstance(item, list | tuple):
        _fill_list(target.list_value, item)
    else:
        msg = f"cannot put a {type(item).__name__} in a protobuf Struct"
        raise TypeError(msg)
