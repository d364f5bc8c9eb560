"""The function inputs the repository ships are valid against the Input CRD and the function."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from function import model
from function.cli import _input
from tests import builders as b
from tests.schemas import ROOT, input_problems


def _composition_input(path: Path) -> dict[str, Any]:
    return _input(list(yaml.safe_load_all(path.read_text())))


@dataclass(frozen=True)
class ShippedInput:
    reason: str
    path: Path


SHIPPED = [
    ShippedInput("The v2 composition's input.", ROOT / "compositions" / "controlplane.yaml"),
    ShippedInput(
        "The legacy composition's input.", ROOT / "compositions" / "legacy" / "xcontrolplane.yaml"
    ),
]


@pytest.mark.parametrize("case", SHIPPED, ids=lambda case: case.reason)
def test_a_compositions_input_is_the_embedded_example_and_valid_against_the_input_crd(
    case: ShippedInput,
) -> None:
    function_input = _composition_input(case.path)
    assert function_input == b.example_input()
    assert input_problems(function_input) == []
    model.parse_input(function_input)


@dataclass(frozen=True)
class InputCase:
    reason: str
    backup: dict[str, Any]
    source: dict[str, Any]
    valid: bool


INPUT_CASES = [
    InputCase(
        "Bucket globs, host patterns of every form and http allowed.",
        {"allowedBuckets": ["acme-shared-*", "acme-?"]},
        {
            "allowedHosts": ["*", "git.acme.example:8443", "*.svc.cluster.local", "[fd00::1]:22"],
            "allowHTTP": True,
        },
        True,
    ),
    InputCase("The defaults, written out.", {"allowedBuckets": []}, {"allowedHosts": ["*"]}, True),
    InputCase("A bucket pattern in upper case.", {"allowedBuckets": ["Acme-*"]}, {}, False),
    InputCase("A host pattern with a scheme.", {}, {"allowedHosts": ["https://github.com"]}, False),
    InputCase("A host pattern with a port but no host.", {}, {"allowedHosts": ["*:443"]}, False),
    InputCase("allowHTTP as a string.", {}, {"allowHTTP": "true"}, False),
    InputCase(
        "Platform variables and health checks of the platform's own.",
        {},
        {
            "variables": {"CLUSTER": "eks-1", "_ORG": "acme"},
            "healthCheckExprs": [
                {"apiVersion": "platform.acme.io/v1alpha1", "kind": "Database", "current": "true"},
                {"apiVersion": "v1", "kind": "Thing", "current": "x", "failed": "y"},
            ],
        },
        True,
    ),
    InputCase(
        "The bounds on teams' syncs, written out.",
        {},
        {"maxTimeout": "15m", "maxStages": 4, "teamHealthChecks": False},
        True,
    ),
    InputCase("A maxTimeout that is no duration.", {}, {"maxTimeout": "half an hour"}, False),
    InputCase("More than eight stages.", {}, {"maxStages": 9}, False),
    InputCase("No stage at all.", {}, {"maxStages": 0}, False),
    InputCase("teamHealthChecks as a string.", {}, {"teamHealthChecks": "false"}, False),
    InputCase(
        "A health check without its current expression.",
        {},
        {"healthCheckExprs": [{"apiVersion": "v1", "kind": "Thing"}]},
        False,
    ),
    InputCase(
        "A health check of a kind in lower case.",
        {},
        {"healthCheckExprs": [{"apiVersion": "v1", "kind": "thing", "current": "true"}]},
        False,
    ),
]


@pytest.mark.parametrize("case", INPUT_CASES, ids=lambda case: case.reason)
def test_the_input_crd_and_the_function_agree_on_the_allow_lists(case: InputCase) -> None:
    function_input = b.example_input()
    function_input["backup"].update(case.backup)
    function_input["source"] = case.source
    assert (input_problems(function_input) == []) is case.valid, input_problems(function_input)
    try:
        model.parse_input(function_input)
    except model.InvalidError:
        assert not case.valid, case.reason
    else:
        assert case.valid, case.reason
