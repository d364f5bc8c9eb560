"""The Markdown fit for a pull request, the terminal's table and the JSON, from one plan."""

from __future__ import annotations

import json
import re

import pytest

from plan import output
from plan.changes import Change, HealthCheck, ObjectId, Plan, StagePlan

NOTE = ObjectId("fixture.acme.io", "Note", "default", "first")
CM = ObjectId("", "ConfigMap", "default", "settings")
DIFF = (
    "--- live/ConfigMap/default/settings\n+++ planned/ConfigMap/default/settings\n"
    "-  a: 1\n+  a: 2\n"
)

PLAN = Plan(
    "team-a/myctp",
    "live",
    (
        StagePlan(
            "packages",
            "myctp-packages",
            "./packages",
            changes=(
                Change("unchanged", ObjectId("pkg.crossplane.io", "Configuration", "", "notes")),
            ),
            health_checks=(HealthCheck("Configuration.pkg.crossplane.io", 1, "current when x"),),
        ),
        StagePlan(
            "config",
            "myctp-config",
            "./config",
            depends_on=("packages",),
            changes=(
                Change(
                    "create", NOTE, "fixture.acme.io/v1alpha1", note="its kind is defined by an XRD"
                ),
                Change("change", CM, "v1", DIFF),
                Change("delete", ObjectId("", "ConfigMap", "default", "old"), "v1"),
            ),
        ),
    ),
    revision="b" * 12,
    base="a" * 12,
    crossplane_version="2.1.4-up.2",
)


def test_the_markdown_has_one_collapsible_section_per_stage_in_stage_order() -> None:
    text = output.markdown(PLAN)

    summaries = re.findall(r"<details( open)?><summary><b>([^<]+)</b>", text)
    assert summaries == [("", "packages"), (" open", "config")], "a stage that changes is open"
    assert text.count("</details>") == 2
    assert text.startswith(output.MARKDOWN_MARKER)


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("| packages | 0 | 0 | 0 | 1 |", "an unchanged stage counts its unchanged objects"),
        ("| config | 1 | 1 | 1 | 0 |", "a stage counts what it creates, changes and deletes"),
    ],
    ids=["an unchanged stage", "a changing stage"],
)
def test_the_summary_table_counts_create_change_delete_unchanged(row: str, reason: str) -> None:
    text = output.markdown(PLAN)

    assert "| stage | create | change | delete | unchanged |" in text
    assert row in text, reason


def test_a_diff_is_fenced_and_every_object_named() -> None:
    text = output.markdown(PLAN)

    assert "```diff\n" + DIFF + "```" in text
    for name in ("Note default/first", "ConfigMap default/settings", "ConfigMap default/old"):
        assert f"`{name}`" in text
    assert "**Plan:** 1 to create, 1 to change, 1 to delete, 1 unchanged." in text


def test_names_and_diffs_cannot_break_out_of_the_markdown() -> None:
    hostile = ObjectId("", "ConfigMap", "default", "x<script>|y")
    fence_in_diff = "+ value: ```\n+ ````\n"
    plan = Plan(
        "team-a/myctp",
        "offline",
        (StagePlan("s<b>", "k", "./s", changes=(Change("change", hostile, "v1", fence_in_diff),)),),
    )

    text = output.markdown(plan)

    assert "<script>" not in text and "<b>s<b>" not in text
    assert "x&lt;script&gt;\\|y" in text
    assert "`````diff\n" + fence_in_diff + "`````" in text


def test_a_failed_stage_is_open_marked_error_and_says_why() -> None:
    plan = Plan(
        "team-a/myctp",
        "offline",
        (
            StagePlan(
                "config", "myctp-config", "./config", error="kustomization path not found: ./config"
            ),
        ),
    )

    text = output.markdown(plan)

    assert "| config | ✖ error | | | |" in text
    assert "<details open><summary><b>config</b>" in text
    assert "**Error:** kustomization path not found: ./config" in text
    assert "**Plan failed**" in text


def test_diffs_past_the_comments_budget_are_left_out_but_every_object_is_listed() -> None:
    big = "+" + "x" * (output.MAX_MARKDOWN_DIFF + 1) + "\n"
    plan = Plan(
        "t/c", "offline", (StagePlan("s", "k", "./s", changes=(Change("change", CM, "v1", big),)),)
    )

    text = output.markdown(plan)

    assert big not in text
    assert "`ConfigMap default/settings`" in text
    assert "left out: the comment is full" in text


def test_the_table_shows_each_stage_its_counts_and_its_objects() -> None:
    text = output.table(PLAN)

    assert "stage config: ./config (after packages)" in text
    assert "  1 to create, 1 to change, 1 to delete, 0 unchanged" in text
    assert "  + create  Note default/first  (its kind is defined by an XRD)" in text
    assert "      +  a: 2" in text
    assert "Crossplane in the control plane: 2.1.4-up.2" in text
    assert "+  a: 2" not in output.table(PLAN, diffs=False)


def test_the_json_holds_every_stage_and_change_with_the_totals() -> None:
    document = json.loads(output.as_json(PLAN))

    assert document["summary"] == {"create": 1, "change": 1, "delete": 1, "unchanged": 1}
    assert [stage["stage"] for stage in document["stages"]] == ["packages", "config"]
    config = document["stages"][1]
    assert config["dependsOn"] == ["packages"]
    assert config["changes"][1] == {
        "action": "change",
        "apiVersion": "v1",
        "group": "",
        "kind": "ConfigMap",
        "namespace": "default",
        "name": "settings",
        "diff": DIFF,
        "note": "",
    }
