"""The compositions the sandbox installs: their Input allows its own git server and no other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from function import model
from function.cli import FUNCTION_NAME
from sandbox.git import GitServer
from sandbox.platform import COMPOSITIONS, sandbox_composition
from tests.schemas import input_problems

WRITER_ARN = "arn:aws:iam::123456789012:user/backup-writer"


@pytest.fixture(scope="module")
def git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    with GitServer(tmp_path_factory.mktemp("git")) as server:
        yield server


def _function_input(composition: dict[str, Any]) -> dict[str, Any]:
    (step,) = [
        step
        for step in composition["spec"]["pipeline"]
        if step["functionRef"]["name"] == FUNCTION_NAME
    ]
    function_input: dict[str, Any] = step["input"]
    return function_input


def _source_refusal(settings: model.Input, url: str) -> str | None:
    try:
        model.check_allowed(model.parse_spec({"source": {"url": url}}), settings)
    except model.InvalidError as error:
        return str(error)
    return None


def test_the_sandbox_installs_both_compositions() -> None:
    assert [path.name for path in COMPOSITIONS] == ["controlplane.yaml", "xcontrolplane.yaml"]


@pytest.mark.parametrize("path", COMPOSITIONS, ids=lambda path: path.name)
def test_the_sandbox_input_allows_exactly_its_git_server_over_http(
    path: Path, git: GitServer
) -> None:
    function_input = _function_input(sandbox_composition(path, WRITER_ARN, git.host))
    # The writer is a moto IAM user, whose ARN the Input CRD's roleArn pattern
    # (role/...) would refuse; Crossplane does not validate inputs, so only the
    # allow-lists are held to the CRD here.
    assert [p for p in input_problems(function_input) if p.startswith("source")] == []
    settings = model.parse_input(function_input)
    assert settings.source.allowed_hosts == (git.host,)
    assert settings.source.allow_http is True
    assert settings.backup is not None
    assert settings.backup.trust.role_arn == WRITER_ARN

    repository = git.repository(f"team-{path.stem}")
    assert _source_refusal(settings, repository.url) is None

    host, port = git.host.rsplit(":", 1)
    elsewhere = {
        "another port of the same loopback address": f"http://{host}:{int(port) % 65535 + 1}/x",
        "the cloud metadata address": "http://169.254.169.254/latest/meta-data",
        "a public host it does not list": "https://github.com/acmeorg/x",
    }
    for what, url in elsewhere.items():
        refusal = _source_refusal(settings, url)
        assert refusal is not None, f"the sandbox's input allows {what}"
        assert "source.allowedHosts" in refusal
