"""Every field of a CRD's or an XRD's schema: its path, type, default, rules and description.

A field is a named property at any depth; items of an array are reached
through ``[]`` (``spec.source.stages[].name``), values of a map through
``{}``. The rules are the schema's own (required, enum, lengths, patterns,
item counts, CEL rules by their messages), said in words for a table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# What every Kubernetes object has at its root; the API server describes them itself.
STANDARD_ROOT_FIELDS = frozenset({"apiVersion", "kind", "metadata"})
SINGULAR = {"characters": "character", "items": "item", "entries": "entry"}


@dataclass(frozen=True)
class Field:
    """One property of a schema."""

    path: str
    type: str
    default: str
    rules: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Kind:
    """One served version of a kind, as its CRD or XRD defines it."""

    source: Path
    definition: str
    """The CustomResourceDefinition's or CompositeResourceDefinition's name."""
    definition_kind: str
    api_version: str
    kind: str
    plural: str
    scope: str
    claim: str | None
    schema: dict[str, Any]
    printer_columns: tuple[dict[str, Any], ...]

    @property
    def description(self) -> str:
        """The kind's own description, on one line."""
        return one_line(self.schema.get("description", ""))

    def fields(self) -> list[Field]:
        """Every field but the standard root ones, in the schema's order."""
        return [
            field
            for field in fields(self.schema)
            if field.path.split(".")[0].split("[")[0] not in STANDARD_ROOT_FIELDS
        ]


def kinds_in(path: Path) -> Iterator[Kind]:
    """Each served version of each CRD or XRD in the YAML file at ``path``."""
    for document in yaml.safe_load_all(path.read_text()):
        if not isinstance(document, dict):
            continue
        spec = document["spec"]
        names = spec["names"]
        is_xrd = document["kind"] == "CompositeResourceDefinition"
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            yield Kind(
                source=path,
                definition=document["metadata"]["name"],
                definition_kind=f"{document['apiVersion']} {document['kind']}",
                api_version=f"{spec['group']}/{version['name']}",
                kind=names["kind"],
                plural=names["plural"],
                scope=spec.get("scope", "LegacyCluster" if is_xrd else "Namespaced"),
                claim=spec.get("claimNames", {}).get("kind"),
                schema=version["schema"]["openAPIV3Schema"],
                printer_columns=tuple(version.get("additionalPrinterColumns", [])),
            )


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces."""
    return " ".join(str(text).split())


def fields(schema: dict[str, Any], prefix: str = "") -> list[Field]:
    """Every property below ``schema``, depth first, in the schema's order."""
    found: list[Field] = []
    required = set(schema.get("required", []))
    for name, node in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        found.append(
            Field(
                path=path,
                type=type_of(node),
                default=_default(node),
                rules=(*(("required",) if name in required else ()), *rules_of(node)),
                description=one_line(node.get("description", "")),
            )
        )
        found.extend(_below(node, path))
    return found


def _below(node: dict[str, Any], path: str) -> list[Field]:
    """The fields inside a property: its own, its items' or its map values'."""
    below = fields(node, path)
    items = node.get("items")
    if isinstance(items, dict):
        below.extend(fields(items, f"{path}[]"))
    values = node.get("additionalProperties")
    if isinstance(values, dict):
        below.extend(fields(values, f"{path}{{}}"))
    return below


def type_of(node: dict[str, Any]) -> str:
    """The type in words: ``string``, ``array of object``, ``map of string``..."""
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"array of {type_of(node.get('items') or {})}"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and "properties" not in node:
            return f"map of {type_of(values)}"
        if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
            return "object (any fields)"
    if "format" in node:
        return f"{kind} ({node['format']})"
    return kind


def rules_of(node: dict[str, Any]) -> list[str]:
    """The schema's rules on one node, in words."""
    rules = _value_rules(node)
    items = node.get("items")
    if isinstance(items, dict) and items.get("type") != "object":
        rules.extend(f"each: {rule}" for rule in _value_rules(items))
    values = node.get("additionalProperties")
    if isinstance(values, dict) and "properties" not in values:
        rules.extend(f"each value: {rule}" for rule in _value_rules(values))
    rules.extend(
        str(validation.get("message") or f"`{one_line(validation['rule'])}`")
        for validation in node.get("x-kubernetes-validations", [])
    )
    return rules


def _value_rules(node: dict[str, Any]) -> list[str]:
    rules = []
    if "enum" in node:
        rules.append("one of " + ", ".join(f"`{value}`" for value in node["enum"]))
    for low, high, unit in (
        ("minLength", "maxLength", "characters"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "entries"),
        ("minimum", "maximum", ""),
    ):
        rule = _bounds(node.get(low), node.get(high), unit)
        if rule:
            rules.append(rule)
    if "pattern" in node:
        rules.append(f"matches `{node['pattern']}`")
    return rules


def _bounds(low: Any, high: Any, unit: str) -> str:
    def counted(number: Any) -> str:
        if not unit:
            return str(number)
        return f"{number} {unit if number != 1 else SINGULAR[unit]}"

    if low is not None and high is not None:
        return f"{low} to {counted(high)}"
    if high is not None:
        return f"at most {counted(high)}"
    if low is not None:
        return f"at least {counted(low)}"
    return ""


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        return ""
    value = node["default"]
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return str(yaml.safe_dump(value, default_flow_style=True, width=1000)).strip()
