"""A fast in-process check of objects against CRD and XRD schemas.

The upstream CRDs (fetched from pinned modules into ``.tools/crds`` by
``tools/build.sh crds``; see tools/CRDS.md) and our own CRDs are read once; each
object is checked with JSON Schema against its kind's openAPIV3Schema, with
unknown fields refused (the API server would silently prune them, which hides
typos). CEL rules are left to ``crossplane beta validate`` and the API server.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sandbox.paths import UPSTREAM_CRDS

ROOT = Path(__file__).resolve().parent.parent
OUR_CRDS = (ROOT / "package" / "provider" / "crds", ROOT / "deploy" / "backup-controller" / "crds")
INPUT_CRD = ROOT / "package" / "function" / "input" / "controlplane.fn.acme.io_inputs.yaml"
XRDS = ROOT / "xrds"


def yaml_files(*folders: Path) -> Iterator[Path]:
    """Every YAML file below the folders, in a stable order."""
    for folder in folders:
        yield from sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml"))


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """Refuse unknown fields wherever the schema lists its fields and keeps no others."""
    schema = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    # Every object carries apiVersion, kind and metadata whatever its schema says.
    for key in ("apiVersion", "kind", "metadata"):
        schema.setdefault("properties", {}).setdefault(
            key, {"type": "string" if key != "metadata" else "object"}
        )
    return schema


@dataclass(frozen=True)
class Kind:
    """One served version of a kind, with its schema."""

    api_version: str
    kind: str
    namespaced: bool
    validator: jsonschema.protocols.Validator


def _kinds_of_crd(crd: dict[str, Any]) -> Iterator[Kind]:
    spec = crd["spec"]
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        schema = _closed(version["schema"]["openAPIV3Schema"])
        yield Kind(
            f"{spec['group']}/{version['name']}",
            spec["names"]["kind"],
            spec["scope"] == "Namespaced",
            jsonschema.Draft7Validator(schema),
        )


def _kinds_of_xrd(xrd: dict[str, Any]) -> Iterator[Kind]:
    spec = xrd["spec"]
    for version in spec["versions"]:
        schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
        # Crossplane adds its own machinery beside ours: spec.crossplane in v2,
        # the legacy top-level references in v1. Leave those open.
        schema = _closed(schema)
        for part in ("spec", "status"):
            schema["properties"].get(part, {}).pop("additionalProperties", None)
        status = schema["properties"].setdefault("status", {"type": "object"})
        status.setdefault("properties", {})["conditions"] = {"type": "array"}
        yield Kind(
            f"{spec['group']}/{version['name']}",
            spec["names"]["kind"],
            spec.get("scope", "LegacyCluster") == "Namespaced",
            jsonschema.Draft7Validator(schema),
        )


def upstream_crds() -> Path:
    """The folder of upstream CRDs; fails with the command that fetches them when missing."""
    if not (UPSTREAM_CRDS / ".stamp").is_file():
        msg = f"{UPSTREAM_CRDS} is missing: fetch it with tools/build.sh crds (make test does)"
        raise FileNotFoundError(msg)
    return UPSTREAM_CRDS


@cache
def kinds() -> dict[tuple[str, str], Kind]:
    """Every kind we can check, by (apiVersion, kind)."""
    found: dict[tuple[str, str], Kind] = {}
    for path in yaml_files(upstream_crds(), *OUR_CRDS, XRDS):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            if doc.get("kind") == "CustomResourceDefinition":
                items = _kinds_of_crd(doc)
            elif doc.get("kind") == "CompositeResourceDefinition":
                items = _kinds_of_xrd(doc)
            else:
                continue
            for kind in items:
                found[(kind.api_version, kind.kind)] = kind
    return found


def problems(obj: dict[str, Any]) -> list[str]:
    """Every way ``obj`` breaks its kind's schema and scope; empty when it is valid."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    kind = kinds().get(key)
    if kind is None:
        return [f"no schema for {key[0]} {key[1]}"]
    name = f"{key[1]} {obj.get('metadata', {}).get('name')}"
    found = [
        f"{name}: {'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in kind.validator.iter_errors(obj)
    ]
    has_namespace = bool(obj.get("metadata", {}).get("namespace"))
    if kind.kind not in {"ControlPlane", "XControlPlane"} and has_namespace != kind.namespaced:
        found.append(f"{name}: namespace {'missing' if kind.namespaced else 'set'} for its scope")
    if len(obj.get("metadata", {}).get("name", "")) > 63:
        found.append(f"{name}: name longer than 63 characters")
    return found


@cache
def _input_kind() -> Kind:
    (kind,) = _kinds_of_crd(yaml.safe_load(INPUT_CRD.read_text()))
    return kind


def input_problems(function_input: dict[str, Any]) -> list[str]:
    """Every way a function input breaks the Input CRD's schema; empty when it is valid.

    Crossplane neither stores nor validates a function input, so it has no
    namespace: only the schema is checked.
    """
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in _input_kind().validator.iter_errors(function_input)
    ]
