"""The compositions the sandbox installs: as shipped, but that their Input allows its git server.

The backups' trust is the shipped one (irsa), which the sandbox plays as EKS
does; the controllers run with the flags and environment deploy/ ships.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from function import model
from function.cli import FUNCTION_NAME
from sandbox import eks, shipped
from sandbox.git import GitServer
from sandbox.platform import COMPOSITIONS, SHIPPED_COMPOSITION, sandbox_composition
from tests.schemas import input_problems


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
    function_input = _function_input(sandbox_composition(path, git.host))
    assert input_problems(function_input) == []
    settings = model.parse_input(function_input)
    assert settings.source.allowed_hosts == (git.host,)
    assert settings.source.allow_http is True
    # Everything but the git hosts is as shipped: the backups' irsa trust too.
    shipped_input = _function_input(yaml.safe_load(path.read_text()))
    assert {k: v for k, v in function_input.items() if k != "source"} == {
        k: v for k, v in shipped_input.items() if k != "source"
    }
    assert settings.backup is not None
    assert settings.backup.trust.irsa is not None

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


def test_the_management_cluster_issues_tokens_as_the_oidc_provider_the_composition_trusts() -> None:
    assert eks.issuer(SHIPPED_COMPOSITION) == "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE"


def test_the_irsa_token_is_for_the_service_account_deploy_ships_and_the_composition_trusts() -> (
    None
):
    namespace, name, role = eks.shipped_service_account()
    settings = model.parse_input(_function_input(yaml.safe_load(SHIPPED_COMPOSITION.read_text())))
    assert settings.backup is not None
    irsa = settings.backup.trust.irsa
    assert irsa is not None
    assert (irsa.service_account.namespace, irsa.service_account.name) == (namespace, name)
    assert role == "arn:aws:iam::123456789012:role/controlplane-backup-controller"


def test_the_controllers_run_with_the_flags_deploy_ships_but_the_metrics_address() -> None:
    backup = shipped.backup_controller()
    assert backup.args == ("--leader-election",)
    assert backup.env["POD_NAMESPACE"] == "controlplane-system"
    # Shipped empty: WebIdentity follows the controller's IRSA role.
    assert backup.env["CONTROLPLANE_BACKUP_CONTROLLER_WEB_IDENTITY_ROLE_ACCOUNT"] == ""
    provider = shipped.provider()
    assert provider.args == ("--leader-election", "--poll=1m")
    assert provider.env["POD_NAMESPACE"] == "crossplane-system"
    # The sandbox's Space takes seconds: its poll is shortened alike, the rest kept.
    assert provider.with_flags(("--poll", "5s")) == ("--leader-election", "--poll", "5s")
