"""A plan for a terminal (a table), for a pull request (Markdown) and for programs (JSON).

Every text here comes from a plan whose Secret values are already masked; the
CLI redacts the values substituted from Secrets once more over the whole
output. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from plan.changes import ACTIONS, Change, Plan, StagePlan

# The Markdown comment's first line, so a CI job finds its earlier comment and edits it.
MARKDOWN_MARKER = "<!-- controlplane-plan -->"
SYMBOLS = {"create": "+", "change": "~", "delete": "-", "unchanged": "="}
# A pull-request comment holds at most 65536 characters (GitHub's limit); diffs past
# this share are cut, the counts and object names always kept.
MAX_MARKDOWN_DIFF = 40_000


def counts(stage: StagePlan | Plan) -> str:
    """``1 to create, 2 to change, 0 to delete, 5 unchanged``."""
    return ", ".join(
        f"{stage.count(action)} {'unchanged' if action == 'unchanged' else 'to ' + action}"
        for action in ACTIONS
    )


def _header(plan: Plan) -> list[str]:
    lines = [f"Plan of {plan.controlplane} ({plan.mode})"]
    if plan.base or plan.revision:
        lines.append(f"revision: {plan.base or '(none)'} -> {plan.revision or '(working tree)'}")
    if plan.crossplane_version:
        lines.append(f"Crossplane in the control plane: {plan.crossplane_version}")
    lines.extend(f"note: {note}" for note in plan.notes)
    return lines


def table(plan: Plan, *, diffs: bool = True) -> str:
    """The plan as a terminal shows it: one block per stage, one line per object."""
    lines = _header(plan)
    for stage in plan.stages:
        lines.append("")
        waits = f" (after {', '.join(stage.depends_on)})" if stage.depends_on else ""
        lines.append(f"stage {stage.stage}: {stage.path}{waits}")
        if stage.error:
            lines.append(f"  error: {stage.error}")
            continue
        lines.append(f"  {counts(stage)}")
        width = max((len(change.action) for change in stage.changes), default=0)
        for change in stage.changes:
            note = f"  ({change.note})" if change.note else ""
            lines.append(
                f"  {SYMBOLS[change.action]} {change.action:<{width}}  {change.object}{note}"
            )
            if diffs and change.diff:
                lines.extend(f"      {line}" for line in change.diff.splitlines())
        lines.extend(
            f"  health: {check.group_kind} x{check.count}: {check.rule}"
            for check in stage.health_checks
        )
        lines.extend(f"  note: {note}" for note in stage.notes)
    lines.append("")
    lines.append(
        f"Plan: {counts(plan)}." if not plan.failed else "Plan failed: see the errors above."
    )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell or list item: no HTML, no pipes."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``, so nothing escapes it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def markdown(plan: Plan) -> str:
    """The plan as a pull-request comment: a summary table, then one collapsible section per stage.

    A stage that changes something, or fails, is open; an unchanged one closed.
    """
    budget = MAX_MARKDOWN_DIFF
    lines = [MARKDOWN_MARKER, f"### Plan of `{_cell(plan.controlplane)}` ({plan.mode})", ""]
    if plan.base or plan.revision:
        base, head = _cell(plan.base or "(none)"), _cell(plan.revision or "working tree")
        lines.append(f"Revision `{base}` → `{head}`")
        lines.append("")
    if plan.crossplane_version:
        lines.extend([f"Crossplane in the control plane: `{_cell(plan.crossplane_version)}`", ""])
    for note in plan.notes:
        lines.extend([f"> {_cell(note)}", ""])
    lines.extend(["| stage | create | change | delete | unchanged |", "|---|---:|---:|---:|---:|"])
    for stage in plan.stages:
        if stage.error:
            lines.append(f"| {_cell(stage.stage)} | ✖ error | | | |")
        else:
            row = " | ".join(str(stage.count(action)) for action in ACTIONS)
            lines.append(f"| {_cell(stage.stage)} | {row} |")
    lines.append("")
    for stage in plan.stages:
        opened = " open" if stage.error or stage.changed else ""
        summary = "error" if stage.error else counts(stage)
        lines.append(
            f"<details{opened}><summary><b>{_cell(stage.stage)}</b> "
            f"(<code>{_cell(stage.path)}</code>): {_cell(summary)}</summary>"
        )
        lines.append("")
        if stage.depends_on:
            lines.append(f"After: {', '.join(f'`{_cell(name)}`' for name in stage.depends_on)}")
            lines.append("")
        if stage.error:
            lines.extend([f"**Error:** {_cell(stage.error)}", ""])
        for change in stage.changes:
            note = f" — {_cell(change.note)}" if change.note else ""
            lines.append(
                f"- `{SYMBOLS[change.action]}` {change.action} `{_cell(str(change.object))}`{note}"
            )
        if stage.changes:
            lines.append("")
        budget = _diffs(lines, stage.changes, budget)
        if stage.health_checks:
            lines.append("Health checks (`wait: true`):")
            lines.extend(
                f"- `{_cell(check.group_kind)}` x{check.count}: {_cell(check.rule)}"
                for check in stage.health_checks
            )
            lines.append("")
        for note in stage.notes:
            lines.extend([f"> {_cell(note)}", ""])
        lines.extend(["</details>", ""])
    total = (
        "**Plan failed**: see the stages marked error."
        if plan.failed
        else f"**Plan:** {counts(plan)}."
    )
    lines.append(total)
    return "\n".join(lines) + "\n"


def _diffs(lines: list[str], changes: Iterable[Change], budget: int) -> int:
    """Append each change's diff in a fenced block while the budget lasts; the budget left."""
    for change in changes:
        if not change.diff:
            continue
        if len(change.diff) > budget:
            lines.extend(
                [f"_diff of `{_cell(str(change.object))}` left out: the comment is full_", ""]
            )
            continue
        budget -= len(change.diff)
        fence = _fence(change.diff)
        lines.extend([f"{fence}diff", change.diff.rstrip("\n"), fence, ""])
    return budget


def as_json(plan: Plan) -> str:
    """The plan as one JSON document (``plan.changes``' fields, in camelCase)."""
    document: dict[str, Any] = {
        "controlplane": plan.controlplane,
        "mode": plan.mode,
        "revision": plan.revision,
        "base": plan.base,
        "crossplaneVersion": plan.crossplane_version,
        "notes": list(plan.notes),
        "summary": {action: plan.count(action) for action in ACTIONS},
        "stages": [
            {
                "stage": stage.stage,
                "kustomization": stage.kustomization,
                "path": stage.path,
                "dependsOn": list(stage.depends_on),
                "error": stage.error,
                "summary": {action: stage.count(action) for action in ACTIONS},
                "changes": [
                    {
                        "action": change.action,
                        "apiVersion": change.api_version,
                        "group": change.object.group,
                        "kind": change.object.kind,
                        "namespace": change.object.namespace,
                        "name": change.object.name,
                        "diff": change.diff,
                        "note": change.note,
                    }
                    for change in stage.changes
                ],
                "healthChecks": [
                    {"groupKind": c.group_kind, "count": c.count, "rule": c.rule}
                    for c in stage.health_checks
                ],
                "notes": list(stage.notes),
            }
            for stage in plan.stages
        ],
    }
    return json.dumps(document, indent=2, sort_keys=False) + "\n"
