"""examples/team-quickstart: its README's status is the function's, its sandbox files are valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from function import cli, render
from function.cli import _input
from sandbox import quickstart
from tests.quickstart import differences, expected_status
from tests.schemas import ROOT, problems

EXAMPLE = quickstart.EXAMPLE


def _documents(path: Path) -> list[dict[str, Any]]:
    return cli._documents(str(path))


def test_the_readmes_status_is_what_the_function_renders_once_everything_is_ready() -> None:
    (composition,) = _documents(ROOT / "compositions" / "controlplane.yaml")
    rendered = render.render(
        _documents(EXAMPLE / "xr.yaml")[0],
        _input([composition]),
        _documents(EXAMPLE / "observed" / "ready"),
    )
    assert differences(expected_status(), rendered[0]["status"]) == []


def test_a_shown_value_that_differs_is_named_by_its_path() -> None:
    # The comparison the test above relies on can fail.
    shown = {"conditions": [{"type": "Ready", "status": "True"}], "source": {"ready": True}}
    actual = {"conditions": [{"type": "Ready", "status": "False"}], "source": {"ready": True}}
    assert differences(shown, actual) == [
        "status.conditions[Ready].status: shown 'True', is 'False'"
    ]


def test_the_sandbox_applies_the_examples_controlplane_pointed_at_its_git_server() -> None:
    namespace, composite = quickstart.manifests("http://127.0.0.1:8080/team-quickstart.git")
    example = _documents(EXAMPLE / "xr.yaml")[0]
    assert namespace["metadata"]["name"] == example["metadata"]["namespace"]
    assert composite["spec"]["source"]["url"] == "http://127.0.0.1:8080/team-quickstart.git"
    composite["spec"]["source"]["url"] = example["spec"]["source"]["url"]
    assert composite == example
    assert problems(composite) == []


def test_the_repository_holds_a_folder_per_stage_each_a_kustomization() -> None:
    files = quickstart.repository_files()
    stages = {stage["path"].removeprefix("./") for stage in _stages()}
    assert {path.split("/")[0] for path in files} == stages
    for stage in stages:
        kustomization = yaml.safe_load(files[f"{stage}/kustomization.yaml"])
        assert {f"{stage}/{resource}" for resource in kustomization["resources"]} | {
            f"{stage}/kustomization.yaml"
        } == {path for path in files if path.startswith(f"{stage}/")}


def _stages() -> list[dict[str, Any]]:
    stages: list[dict[str, Any]] = _documents(EXAMPLE / "xr.yaml")[0]["spec"]["source"]["stages"]
    return stages
