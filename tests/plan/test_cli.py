"""``controlplane-plan`` on a fork-like checkout: offline, with bad input, and unreachable."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from plan import cli

from .conftest import commit, configmap, function_input, staged_composite

PASSWORD = "s3cret-Value-42"
TOKEN = "tok-0123456789abcdef"


@dataclass
class Team:
    repo: Path
    controlplane: Path
    function_input: Path
    shas: list[str] = field(default_factory=list)

    def plan(self, *args: str) -> Result:
        return CliRunner().invoke(
            cli.main,
            [
                "--controlplane",
                str(self.controlplane),
                "--function-input",
                str(self.function_input),
                "--repo",
                str(self.repo),
                *args,
            ],
        )


def provider(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "pkg.crossplane.io/v1",
        "kind": "Provider",
        "metadata": {"name": name},
        "spec": {"package": f"xpkg.example.org/acme/{name}:v1.0.0"},
    }


FIRST = {
    "packages/provider.yaml": provider("provider-nop"),
    "config/settings.yaml": configmap(
        "settings", {"env": "${ENVIRONMENT}", "name": "${CONTROLPLANE_NAME}"}
    ),
    "config/old.yaml": configmap("old", {"a": "1"}),
}


def team_at(tmp_path: Path, xr: dict[str, Any] | None = None) -> Team:
    controlplane = tmp_path / "controlplane.yaml"
    controlplane.write_text(yaml.safe_dump(xr or staged_composite()))
    given = tmp_path / "input.yaml"
    given.write_text(yaml.safe_dump(function_input()))
    team = Team(tmp_path / "repo", controlplane, given)
    team.shas.append(commit(team.repo, FIRST, "first"))
    return team


@pytest.fixture
def team(tmp_path: Path, build_tool: Path, monkeypatch: pytest.MonkeyPatch) -> Team:
    monkeypatch.setenv("CONTROLPLANE_PLAN_BUILD", str(build_tool))
    return team_at(tmp_path)


def test_a_push_is_planned_offline_between_base_and_head_with_exit_code_2(team: Team) -> None:
    team.shas.append(
        commit(
            team.repo,
            {
                "config/settings.yaml": configmap(
                    "settings", {"env": "${ENVIRONMENT}", "name": "changed"}
                ),
                "config/new.yaml": configmap("new", {"b": "2"}),
            },
            "second",
            remove=("config/old.yaml",),
        )
    )

    result = team.plan("--offline", "--base", team.shas[0], "--head", team.shas[1], "-o", "json")

    assert result.exit_code == 2, result.output
    document = json.loads(result.output)
    assert [(s["stage"], s["summary"]) for s in document["stages"]] == [
        ("packages", {"create": 0, "change": 0, "delete": 0, "unchanged": 1}),
        ("config", {"create": 1, "change": 1, "delete": 1, "unchanged": 0}),
    ]
    config = {c["name"]: c for c in document["stages"][1]["changes"]}
    assert "+  name: changed" in config["settings"]["diff"]
    assert "-  name: myctp" in config["settings"]["diff"], "the platform's variable was substituted"


def test_a_push_that_changes_nothing_exits_0(team: Team) -> None:
    team.shas.append(commit(team.repo, {"README.md": "docs only"}, "docs"))

    result = team.plan("--offline", "--base", team.shas[0], "--head", team.shas[1])

    assert result.exit_code == 0, result.output
    assert "Plan: 0 to create, 0 to change, 0 to delete, 3 unchanged." in result.output


def test_the_working_tree_is_the_head_when_no_head_is_given(team: Team) -> None:
    (team.repo / "config" / "extra.yaml").write_text(yaml.safe_dump(configmap("extra", {"c": "3"})))

    result = team.plan("--offline", "--base", "HEAD", "-o", "markdown")

    assert result.exit_code == 2, result.output
    assert "| config | 1 | 0 | 0 | 2 |" in result.output


@dataclass
class BadInput:
    reason: str
    files: dict[str, Any]
    remove: tuple[str, ...]
    stage: str
    expected: str


BAD_INPUT = [
    BadInput(
        "a broken kustomization names the stage and Flux's error",
        {"config/kustomization.yaml": {"resources": ["missing.yaml"]}},
        (),
        "config",
        "kustomize build failed",
    ),
    BadInput(
        "a missing variable names the stage and the variable",
        {"config/settings.yaml": configmap("settings", {"x": "${NOT_DEFINED}"})},
        (),
        "config",
        "NOT_DEFINED",
    ),
    BadInput(
        "a stage path that does not exist names the stage and the path",
        {},
        ("packages/provider.yaml",),
        "packages",
        "kustomization path not found: ./packages",
    ),
]


@pytest.mark.parametrize("case", BAD_INPUT, ids=lambda case: case.reason)
def test_bad_input_is_a_clear_error_naming_the_stage_with_exit_code_1(
    team: Team, case: BadInput
) -> None:
    team.shas.append(commit(team.repo, case.files, "bad", remove=case.remove))

    table = team.plan("--offline", "--base", team.shas[0], "--head", team.shas[1])
    as_json = team.plan("--offline", "--base", team.shas[0], "--head", team.shas[1], "-o", "json")

    assert table.exit_code == 1, table.output
    assert f"stage {case.stage}: " in table.output
    assert "  error: " in table.output and case.expected in table.output
    assert "Traceback" not in table.output
    failed = [s for s in json.loads(as_json.stdout)["stages"] if s["error"]]
    assert [s["stage"] for s in failed] == [case.stage]
    assert case.expected in failed[0]["error"]


def test_a_value_substituted_from_a_secret_is_never_shown(
    tmp_path: Path, build_tool: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTROLPLANE_PLAN_BUILD", str(build_tool))
    team = team_at(
        tmp_path, staged_composite(substituteFrom=[{"kind": "Secret", "name": "team-secrets"}])
    )
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "team-secrets", "namespace": "team-a"},
                "data": {"DB_PASSWORD": base64.b64encode(PASSWORD.encode()).decode()},
            }
        )
    )
    team.shas.append(
        commit(
            team.repo,
            {"config/settings.yaml": configmap("settings", {"dsn": "db://u:${DB_PASSWORD}@h"})},
            "dsn",
        )
    )

    for fmt in ("table", "markdown", "json"):
        result = team.plan(
            "--offline",
            "--base",
            team.shas[0],
            "--head",
            team.shas[1],
            "--substitute-from",
            str(values),
            "-o",
            fmt,
        )
        assert result.exit_code == 2, result.output
        assert PASSWORD not in result.output
        assert "db://u:***@h" in result.output


def test_offline_without_values_for_substitute_from_says_so_and_still_plans(
    tmp_path: Path, build_tool: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTROLPLANE_PLAN_BUILD", str(build_tool))
    team = team_at(
        tmp_path, staged_composite(substituteFrom=[{"kind": "ConfigMap", "name": "team-vars"}])
    )

    result = team.plan("--offline")

    assert result.exit_code == 2, result.output
    assert "substituteFrom is not read offline" in result.output


def test_an_unreachable_control_plane_is_an_error_naming_the_stage_and_no_credential(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": TOKEN}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )

    result = team.plan("--kubeconfig", str(kubeconfig))

    assert result.exit_code == 1, result.output
    assert "stage packages: " in result.output
    assert "error: Provider provider-nop: " in result.output
    assert "127.0.0.1:1" in result.output
    assert TOKEN not in result.output
    assert "Traceback" not in result.output
