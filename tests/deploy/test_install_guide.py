"""docs/install.md gives the install steps the sandbox follows, in the same order, no more.

The steps are `sandbox.install.STEPS`: the sandbox applies each of them, and
tests/system/test_install.py checks that its cluster holds every object they
make. Here the guide's shell commands that install something (`helm
install`, `kubectl apply`, `kubectl create secret`) are read out of its code
blocks and held to those steps, and each step's manifests are built.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from sandbox import install
from sandbox.chart import CHART, HELM_BIN
from sandbox.kubectl import KUBECTL_BIN
from tests.schemas import ROOT

GUIDE = ROOT / "docs" / "install.md"
# A shell block, with the docs marker on the line before it (tests/docs/test_docs.py).
_BLOCK = re.compile(
    r"^(<!--[^\n]*-->)?\n?```(?:shell|sh|bash)\n(.*?)^```", re.MULTILINE | re.DOTALL
)
# A block whose marker calls it an alternative (Upbound Cloud instead of a Space
# kubeconfig) is not a step of the one install path the sandbox follows.
_ALTERNATIVE = "an alternative to step"
_INSTALLS = ("helm install ", "kubectl apply ", "kubectl -n crossplane-system create secret ")


def guide_commands() -> list[str]:
    """The installing commands of the guide's shell blocks, continuations joined, comments cut.

    Blocks marked as an alternative to a step are left out.
    """
    found = []
    for marker, block in _BLOCK.findall(GUIDE.read_text()):
        if _ALTERNATIVE in marker:
            continue
        for line in block.replace("\\\n", " ").splitlines():
            command = " ".join(line.split("#", 1)[0].split())
            if command.startswith(_INSTALLS):
                found.append(command)
    return found


def test_the_guide_gives_the_sandboxs_install_steps_in_order() -> None:
    assert guide_commands() == [step.command for step in install.STEPS]


def test_the_guide_installs_crossplane_at_the_pinned_release() -> None:
    (helm,) = [command for command in guide_commands() if command.startswith("helm ")]
    assert f"--version {install.crossplane_version()}" in helm


@pytest.mark.parametrize("step", install.STEPS, ids=lambda step: step.name)
def test_each_step_builds_its_objects(step: install.Step) -> None:
    needed = {install.How.KUSTOMIZE: KUBECTL_BIN, install.How.HELM: HELM_BIN}.get(step.how)
    if needed is not None and not needed.is_file():
        pytest.skip(f"{needed} is missing: run tools/build.sh")
    if step.how is install.How.HELM and not (CHART / "Chart.yaml").is_file():
        pytest.skip(f"{CHART} is missing: run tools/build.sh helm")
    assert install.refs(install.manifests(step))


def test_no_two_steps_make_the_same_object() -> None:
    if not (KUBECTL_BIN.is_file() and HELM_BIN.is_file() and (CHART / "Chart.yaml").is_file()):
        pytest.skip("kubectl, helm and core's chart are built by tools/build.sh")
    counted = Counter(
        ref for step in install.STEPS for ref in install.refs(install.manifests(step))
    )
    assert [ref for ref, count in counted.items() if count > 1] == []
