"""The example CI workflow calls controlplane-plan as the command is: options, exit codes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from plan import cli
from plan.build import BINARY_VARIABLE
from tests.schemas import ROOT

EXAMPLE = ROOT / "examples" / "plan-pull-request"


def steps(path: Path) -> list[dict[str, Any]]:
    workflow = yaml.safe_load(path.read_text())
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def plan_script() -> str:
    [step] = [step for step in steps(EXAMPLE / "plan.yaml") if step.get("id") == "plan"]
    return str(step["run"])


def test_every_option_the_workflow_passes_is_one_the_command_has() -> None:
    options = {name for param in cli.main.params for name in getattr(param, "opts", [])}
    used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", plan_script()))

    assert used, "the workflow passes options"
    assert used <= options, f"unknown: {sorted(used - options)}"


def test_the_workflow_asks_for_markdown_and_fails_only_on_exit_code_1() -> None:
    script = plan_script()

    assert "-o markdown" in script
    assert '[ "$code" -ne 1 ]' in script
    assert "--offline" in script and "--kubeconfig" in script


def test_the_workflow_points_the_command_at_the_release_build_program() -> None:
    [install] = [
        s for s in steps(EXAMPLE / "plan.yaml") if s.get("name") == "Install controlplane-plan"
    ]

    assert BINARY_VARIABLE in install["run"]
    assert "controlplane-plan-build-linux-amd64" in install["run"]
    assert "sha256sum --check" in install["run"]


def test_the_fork_comment_workflow_never_checks_out_the_forks_code() -> None:
    used = [step.get("uses", "") for step in steps(EXAMPLE / "comment.yaml")]

    assert "actions/download-artifact@v4" in used
    assert not [uses for uses in used if uses.startswith("actions/checkout")]
