"""``function-controlplane render``: crossplane render's arguments, and clear usage errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml
from click.testing import CliRunner

from function.cli import main
from tests.schemas import ROOT

GIT_SOURCE = ROOT / "examples" / "git-source"
COMPOSITION = ROOT / "compositions" / "controlplane.yaml"


def render(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["render", *args])
    return result.exit_code, result.output


@dataclass
class SameCase:
    reason: str
    args: list[str]


# Each spelling must print what crossplane render's own order and flags print.
CROSSPLANE_ORDER = [
    str(GIT_SOURCE / "xr.yaml"),
    str(COMPOSITION),
    str(GIT_SOURCE / "functions.yaml"),
    "--observed-resources",
    str(GIT_SOURCE / "observed" / "ready"),
]
SAME_CASES = [
    SameCase("The Functions file may be left out.", CROSSPLANE_ORDER[:2] + CROSSPLANE_ORDER[3:]),
    SameCase("-o is --observed-resources.", [*CROSSPLANE_ORDER[:3], "-o", CROSSPLANE_ORDER[4]]),
    SameCase(
        "The older spellings --input and --observed still work.",
        [
            CROSSPLANE_ORDER[0],
            "--input",
            CROSSPLANE_ORDER[1],
            "--observed",
            CROSSPLANE_ORDER[4],
        ],
    ),
]


@pytest.mark.parametrize("case", SAME_CASES, ids=lambda case: case.reason)
def test_every_spelling_renders_the_same(case: SameCase) -> None:
    want_code, want = render(*CROSSPLANE_ORDER)
    assert want_code == 0, want
    code, output = render(*case.args)
    assert (code, output) == (0, want), case.reason


def test_include_full_xr_copies_the_composites_spec_and_metadata() -> None:
    _, plain = render(*CROSSPLANE_ORDER)
    _, full = render(*CROSSPLANE_ORDER, "-x")
    xr = yaml.safe_load((GIT_SOURCE / "xr.yaml").read_text())
    plain_xr, full_xr = next(yaml.safe_load_all(plain)), next(yaml.safe_load_all(full))
    assert "spec" not in plain_xr
    assert full_xr["spec"] == xr["spec"]
    assert full_xr["metadata"] == xr["metadata"]
    assert full_xr["status"] == plain_xr["status"]


def test_with_no_arguments_the_embedded_example_renders() -> None:
    code, output = render()
    assert code == 0, output
    kinds = [doc["kind"] for doc in yaml.safe_load_all(output)]
    assert kinds[0] == "ControlPlane" and "Instance" in kinds


@dataclass
class BadCase:
    reason: str
    args: list[str]
    want_in_message: str


BAD_CASES = [
    BadCase(
        "The Composition given twice is refused.",
        [CROSSPLANE_ORDER[0], str(COMPOSITION), "--input", str(COMPOSITION)],
        "either as COMPOSITION or as --input",
    ),
    BadCase(
        "A Functions file without this function is refused.",
        [CROSSPLANE_ORDER[0], str(COMPOSITION), str(COMPOSITION)],
        "FUNCTIONS names no pkg.crossplane.io Function function-controlplane",
    ),
    BadCase(
        "A missing composite is refused by name.",
        ["no-such-xr.yaml"],
        "'no-such-xr.yaml' does not exist",
    ),
    BadCase(
        "A folder given as the composite is refused.",
        [str(GIT_SOURCE / "observed")],
        "is a directory",
    ),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda case: case.reason)
def test_bad_arguments_are_usage_errors(case: BadCase) -> None:
    code, output = render(*case.args)
    assert code == 2, (case.reason, output)
    assert case.want_in_message in output, output
    assert "Traceback" not in output
