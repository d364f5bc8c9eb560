"""The API reference and the configuration tables: every field described, every page current.

``make docs`` (``python -m tools.docs``) writes them from the schemas and the
programs' flags; these tests fail, naming the field, flag or page and the
command that mends it, when someone adds a field without a description or
changes a schema or a flag without regenerating.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from tools.docs import flags, markdown, pages, schema

ROOT = pages.ROOT


def test_every_field_of_every_shipped_schema_and_every_flag_has_a_description() -> None:
    problems = pages.undescribed()
    assert problems == [], "\n".join(problems)


def test_every_generated_page_is_current() -> None:
    stale = []
    for path, content in pages.generated().items():
        current = path.read_text() if path.exists() else ""
        if current != content:
            diff = difflib.unified_diff(
                current.splitlines(), content.splitlines(), "on disk", "generated", lineterm=""
            )
            stale.append(
                f"{path.relative_to(ROOT)} is stale: run `make docs` and commit it\n"
                + "\n".join(list(diff)[:30])
            )
    assert stale == [], "\n\n".join(stale)


def test_no_reference_page_outlives_its_schema() -> None:
    expected = {path for path in pages.generated() if path.parent == pages.REFERENCE}
    left_over = sorted(
        str(path.relative_to(ROOT)) for path in pages.REFERENCE.glob("*") if path not in expected
    )
    assert left_over == [], f"no schema defines these; `make docs` removes them: {left_over}"


def test_the_reference_has_a_page_for_every_kind_the_product_ships() -> None:
    shipped = {kind.kind for kind in pages.kinds()}
    assert {
        "ControlPlane",
        "XControlPlane",
        "Instance",
        "ProviderConfig",
        "ClusterProviderConfig",
        "Backup",
        "BackupSchedule",
        "Input",
    } <= shipped
    index = (pages.REFERENCE / "README.md").read_text()
    for kind in pages.kinds():
        assert f"]({pages.page_of(kind)})" in index, kind.kind


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def test_the_legacy_xrd_carries_the_v2_xrds_schema_field_for_field() -> None:
    # The legacy XRD's schema is a copy ("change both together"); a field, rule or
    # default added to one only would make the two APIs differ silently. Only the
    # descriptions may differ (a claim's namespace where the v2 one says the composite's).
    def schema_of(path: Path) -> Any:
        (version,) = yaml.safe_load(path.read_text())["spec"]["versions"]
        return _without_descriptions(version["schema"]["openAPIV3Schema"])

    assert schema_of(ROOT / "xrds" / "legacy" / "xcontrolplane.yaml") == schema_of(
        ROOT / "xrds" / "controlplane.yaml"
    )
    v2, legacy = (
        {f.path for f in kind.fields() if f.description}
        for kind in pages.kinds()
        if kind.kind in {"ControlPlane", "XControlPlane"}
    )
    assert v2 == legacy


# The generator's own rules, on small schemas: what the tests above rely on.

EXAMPLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An example.",
    "properties": {
        "apiVersion": {"type": "string"},
        "spec": {
            "type": "object",
            "description": "What is wanted.",
            "required": ["url"],
            "x-kubernetes-validations": [{"rule": "self.a != self.b", "message": "a is not b"}],
            "properties": {
                "url": {"type": "string", "description": "Where.", "maxLength": 2048},
                "channel": {
                    "type": "string",
                    "description": "Which.",
                    "enum": ["None", "Stable"],
                    "default": "Stable",
                },
                "ref": {
                    "type": "object",
                    "default": {"branch": "main"},
                    "properties": {"branch": {"type": "string", "minLength": 1}},
                },
                "stages": {
                    "type": "array",
                    "description": "Stages.",
                    "maxItems": 8,
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string", "description": "A name."}},
                    },
                },
                "substitute": {
                    "type": "object",
                    "description": "Variables.",
                    "additionalProperties": {"type": "string", "maxLength": 1},
                },
                "prune": {"type": "boolean", "description": "Prune.", "default": True},
            },
        },
    },
}


@dataclass(frozen=True)
class FieldCase:
    reason: str
    path: str
    type: str
    default: str
    rules: tuple[str, ...]


FIELD_CASES = [
    FieldCase(
        "An object's CEL rules are said by their messages.", "spec", "object", "", ("a is not b",)
    ),
    FieldCase(
        "A required field says so, with its length.",
        "spec.url",
        "string",
        "",
        ("required", "at most 2048 characters"),
    ),
    FieldCase(
        "An enum lists its values, and the default is shown.",
        "spec.channel",
        "string",
        "Stable",
        ("one of `None`, `Stable`",),
    ),
    FieldCase("An object's default is shown as YAML.", "spec.ref", "object", "{branch: main}", ()),
    FieldCase(
        "A nested field is reached by its path; one character is singular.",
        "spec.ref.branch",
        "string",
        "",
        ("at least 1 character",),
    ),
    FieldCase(
        "An array's item count is a rule.",
        "spec.stages",
        "array of object",
        "",
        ("at most 8 items",),
    ),
    FieldCase("An item's field is reached through [].", "spec.stages[].name", "string", "", ()),
    FieldCase(
        "A map says its values' type and rules.",
        "spec.substitute",
        "map of string",
        "",
        ("each value: at most 1 character",),
    ),
    FieldCase("A false-y default is still shown.", "spec.prune", "boolean", "true", ()),
]


@pytest.mark.parametrize("case", FIELD_CASES, ids=lambda case: case.reason)
def test_a_field_is_listed_by_path_with_its_type_default_and_rules(case: FieldCase) -> None:
    found = {field.path: field for field in schema.fields(EXAMPLE_SCHEMA)}
    field = found[case.path]
    assert (field.type, field.default, field.rules) == (case.type, case.default, case.rules)


def _kind(node: dict[str, Any]) -> schema.Kind:
    return schema.Kind(
        source=ROOT / "xrds" / "example.yaml",
        definition="examples.example.org",
        definition_kind="apiextensions.k8s.io/v1 CustomResourceDefinition",
        api_version="example.org/v1",
        kind="Example",
        plural="examples",
        scope="Namespaced",
        claim=None,
        schema=node,
        printer_columns=(),
    )


def test_an_undescribed_field_is_named_with_its_file_and_the_command_that_regenerates() -> None:
    problems = pages.undescribed([_kind(EXAMPLE_SCHEMA)], [])
    assert problems == [
        "xrds/example.yaml: Example field spec.ref has no description: add a description to it "
        "in the schema, then run `make docs`",
        "xrds/example.yaml: Example field spec.ref.branch has no description: add a description "
        "to it in the schema, then run `make docs`",
    ]


def test_a_described_schema_has_no_problems_and_the_standard_root_fields_need_none() -> None:
    described = copy.deepcopy(EXAMPLE_SCHEMA)
    ref = described["properties"]["spec"]["properties"]["ref"]
    ref["description"] = "A ref."
    ref["properties"]["branch"]["description"] = "A branch."
    assert pages.undescribed([_kind(described)], []) == []


@click.command("tool", context_settings={"auto_envvar_prefix": "TOOL"})
@click.option("--poll", default=None, show_default="1m", help="How often.")
@click.option("--endpoint", multiple=True, help="An endpoint; repeatable.")
@click.option("--own", envvar="OWN_VARIABLE", default=3, help="Its own variable.")
@click.option("--quiet", "-q", is_flag=True)
def _tool(**_: Any) -> None:
    """A tool."""


@dataclass(frozen=True)
class FlagCase:
    reason: str
    name: str
    variable: str
    type: str
    default: str


FLAG_CASES = [
    FlagCase("A shown default string is the default.", "--poll", "TOOL_POLL", "text", "1m"),
    FlagCase(
        "A repeatable flag's variable holds values separated by spaces.",
        "--endpoint",
        "TOOL_ENDPOINT (space separated)",
        "text, repeatable",
        "",
    ),
    FlagCase("Its own variable wins over the prefix.", "--own", "OWN_VARIABLE", "integer", "3"),
    FlagCase("A boolean flag is off by default.", "--quiet", "TOOL_QUIET", "flag", "off"),
]


@pytest.mark.parametrize("case", FLAG_CASES, ids=lambda case: case.reason)
def test_a_flag_is_listed_with_its_variable_type_and_default(case: FlagCase) -> None:
    found = {flag.names[0]: flag for flag in flags.command(_tool).flags}
    flag = found[case.name]
    assert (flag.variable, flag.type, flag.default) == (case.variable, case.type, case.default)


def test_a_flag_without_help_is_named_with_the_command_that_regenerates() -> None:
    assert pages.undescribed([], [flags.command(_tool)]) == [
        "tool --quiet has no help: add help= to its click.option, then run `make docs`"
    ]


def test_a_generated_block_is_replaced_and_the_prose_around_it_kept() -> None:
    page = f"Before.\n\n{markdown.block('table', 'old')}\n\nAfter.\n"
    assert markdown.replace_blocks(page, {"table": "new"}, "page.md") == (
        f"Before.\n\n{markdown.block('table', 'new')}\n\nAfter.\n"
    )


def test_a_page_without_a_blocks_markers_is_an_error_naming_the_page_and_the_markers() -> None:
    with pytest.raises(markdown.MissingBlockError, match=r"page\.md has no generated block table"):
        markdown.replace_blocks("Only prose.\n", {"table": "new"}, "page.md")


@dataclass(frozen=True)
class CellCase:
    reason: str
    value: str
    cell: str


CELL_CASES = [
    CellCase("A pipe does not end the cell.", "a | b", "a \\| b"),
    CellCase("Angle brackets are text, not HTML.", "<schedule>-final", "&lt;schedule&gt;-final"),
    CellCase("Stars are not emphasis.", '"*" allows any host', '"\\*" allows any host'),
    CellCase("A code span is kept, its pipe escaped.", "`a|b` or c", "`a\\|b` or c"),
]


@pytest.mark.parametrize("case", CELL_CASES, ids=lambda case: case.reason)
def test_a_description_is_escaped_for_a_table_cell(case: CellCase) -> None:
    assert markdown.text(case.value) == case.cell
